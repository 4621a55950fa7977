"""`wg-mesh render`: a site's wg0.conf and user data as the program renders them, private keys masked unless asked.

Checked against the program itself: the shared runs of every stack file under Pulumi's mocks (tests/conftest.py,
`applied` and `applied_user_data`), rendered again here from the same keys and addresses, must give the same text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ProgramRun
from wg_mesh.cli import main
from wg_mesh.cli.rendercmd import MASK, DisplayKeys, render_site
from wg_mesh.config import MeshConfig
from wg_mesh.plan import wgkey
from wg_mesh.plan.validate import load_mesh

REPO = Path(__file__).resolve().parent.parent
WG_KEY = re.compile(r"[A-Za-z0-9+/]{43}=")


def sections(text: str) -> dict[str, str]:
    """The output's parts by their heading's first word after `### ` (`/etc/wireguard/wg0.conf`, `user`)."""
    parts = text.split("\n### ")[1:]
    return {part.split(" ", 1)[0]: part.split("\n", 1)[1] for part in parts}


def rendered_like(run: ProgramRun, cfg: MeshConfig, site: str) -> str:
    keys = DisplayKeys(
        private={n: str(s.private_key.value) for n, s in run.sites.items()},
        public={n: str(s.public_key.value) for n, s in run.sites.items()},
        verify_key=str(run.verify_key.value) if run.verify_key is not None else "",
    )
    ips = {n: str(s.public_ip.value) for n, s in run.sites.items()}
    return render_site(
        cfg, site, project="wg-mesh", stack=run.stack, label="t", show_secrets=True, keys=keys, public_ips=ips
    )


def test_wg0_conf_and_user_data_are_the_programs(applied_user_data: ProgramRun) -> None:
    cfg = load_mesh(applied_user_data.raw)
    for name, site in applied_user_data.sites.items():
        got = sections(rendered_like(applied_user_data, cfg, name))
        assert got["/etc/wireguard/wg0.conf"] == site.wg_config.value, name
        assert got["user"] == site.user_data.value, name


def test_live_user_data_is_the_programs(applied: ProgramRun) -> None:
    cfg = load_mesh(applied.raw)
    if cfg.delivery != "live":
        pytest.skip("user-data delivery: test_wg0_conf_and_user_data_are_the_programs")
    single = [s for s in cfg.sites if getattr(s, "gateways", 1) == 1]
    if not single:
        pytest.skip("every site is an HA pair: its user data holds an `ha` object known only at deploy")
    for site in single:
        got = sections(rendered_like(applied, cfg, site.name))
        assert got["user"] == applied.sites[site.name].user_data.value, site.name
        assert got["/etc/wireguard/wg0.conf"] == applied.sites[site.name].wg_config.value, site.name


@pytest.mark.parametrize(("stack", "site"), [("dev", "aws-use1"), ("dev", "gcp-euw3"), ("prod", "vps-fra")])
def test_private_keys_are_masked_unless_asked(
    stack: str, site: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    made: list[str] = []
    generate = wgkey.generate_private_key

    def recorded() -> str:
        made.append(generate())
        return made[-1]

    monkeypatch.setattr(wgkey, "generate_private_key", recorded)
    assert main(["render", "--stack", stack, "--site", site]) == 0
    masked = capsys.readouterr().out
    assert made and not any(key in masked for key in made)
    assert f"PrivateKey = {MASK}\n" in masked
    assert "generated for this display" in masked and "Pulumi state" in masked
    assert "Private keys are masked." in masked
    made.clear()
    assert main(["render", "--stack", stack, "--site", site, "--show-secrets"]) == 0
    shown = capsys.readouterr().out
    own = [key for key in made if f"PrivateKey = {key}\n" in shown]
    assert len(own) == 1 and MASK not in shown


def test_user_data_mode_masks_the_key_inside_the_user_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--file", str(REPO / "Pulumi.dev.yaml"), "--site", "aws-use1", "--part", "user-data"]) == 0
    out = capsys.readouterr().out
    assert "### /etc/wireguard/wg0.conf" not in out and "#cloud-config" in out
    assert f"\n    PrivateKey = {MASK}\n" in out  # wg0.conf as write_files content
    assert not [k for k in WG_KEY.findall(out) if "PrivateKey = " + k in out]


def test_an_unknown_site_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    assert main(["render", "--stack", "dev", "--site", "aws-usw2"]) == 2
    assert capsys.readouterr().err == (
        "--site aws-usw2: no such site in stack dev (Pulumi.dev.yaml); its sites: aws-use1, gcp-euw3\n"
    )
