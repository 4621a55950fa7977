"""The static-site procedure (docs/how-to/static-sites.md, once the README's), run for real with /etc redirected:
the key is never world-readable, the package is installed before anything is written to /etc/wireguard, and nothing
lands on the local disk."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "how-to" / "static-sites.md"
SECRET = "[Interface]\nPrivateKey = c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=\n"


def procedure() -> str:
    readme = PAGE.read_text()
    section = readme[readme.index("**Applying a static site's config.**") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    return block.group(1).replace("\\\n", " ")


def remote_commands(text: str) -> list[str]:
    """What each `ssh root@HOST '...'` runs, in order."""
    return re.findall(r"ssh root@\S+ '([^']*)'", text)


def test_package_first_then_the_config() -> None:
    first, second = remote_commands(procedure())
    assert "apt-get install -y wireguard-tools" in first and "/etc/wireguard" not in first
    assert "apt-get" not in second  # apt would read the piped config from stdin


def test_the_config_never_touches_the_local_disk() -> None:
    text = procedure()
    local = re.sub(r"'[^']*'", "''", text)  # drop quoted (remote and python) parts
    assert ">" not in local and "scp" not in text and "wg0.conf" not in local


def test_the_remote_commands_leave_the_key_0600_in_a_0700_directory(tmp_path: Path) -> None:
    _, write = remote_commands(procedure())
    etc = tmp_path / "etc"
    (etc / "sysctl.d").mkdir(parents=True)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("sysctl", "systemctl"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path}/calls\n')
        (stubs / tool).chmod(0o755)
    script = write.replace("/etc/", f"{etc}/")
    result = subprocess.run(
        ["/bin/sh", "-c", f"umask 022; {script}"], input=SECRET, text=True, capture_output=True, check=False,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    conf = etc / "wireguard" / "wg0.conf"
    assert conf.read_text() == SECRET
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert stat.S_IMODE((etc / "wireguard").stat().st_mode) == 0o700
    assert stat.S_IMODE((etc / "sysctl.d" / "99-wg-mesh.conf").stat().st_mode) == 0o644
    assert os.listdir(etc / "wireguard") == ["wg0.conf"]  # the temporary file was renamed, not left behind
    calls = (tmp_path / "calls").read_text().splitlines()
    # stopped while the running file is in place (its PostDown undoes its PostUp), then the new file started; the
    # new file's PostDown must never run against the old file's rules (the rehearsal found `restart` after the move)
    assert calls == ["sysctl --system", "systemctl stop wg-quick@wg0", "systemctl enable --now wg-quick@wg0"]


def live_procedure() -> str:
    readme = PAGE.read_text()
    section = readme[readme.index("With `delivery: live` the static site's `static_site_cloud_init`") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    return block.group(1)


def test_the_live_procedure_leaves_key_and_document_0600_in_a_0700_directory(tmp_path: Path) -> None:
    """delivery: live: the page's loop, run with `pulumi` and `ssh` stubbed (ssh runs its command locally with /etc
    redirected): both files land where the agent reads them (wg_mesh.plan.live), 0600, in a 0700 directory, nothing
    left."""
    from wg_mesh.plan import live

    etc, stubs = tmp_path / "etc", tmp_path / "bin"
    etc.mkdir()
    stubs.mkdir()
    values = {"static_site_private_keys": "a-private-key", "static_site_documents": '{"format": "wg-mesh.peers/1"}'}
    (stubs / "pulumi").write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"values = {values!r}\n"
        "print(json.dumps({'vps-fra': values[sys.argv[6]]}))\n"
    )
    (stubs / "ssh").write_text(f'#!/bin/sh\nshift\nexec /bin/sh -c "$(printf %s "$1" | sed "s#/etc/#{etc}/#g")"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    result = subprocess.run(
        ["/bin/bash", "-c", f"umask 022; {live_procedure()}"], text=True, capture_output=True, check=False,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    directory = etc / "wg-mesh"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert sorted(os.listdir(directory)) == ["document.json", "private.key"]
    for path, output in ((live.STATIC_PRIVATE_KEY_PATH, "static_site_private_keys"),
                         (live.STATIC_DOCUMENT_PATH, "static_site_documents")):  # fmt: skip
        written = etc / path.removeprefix("/etc/")
        assert written.read_text() == values[output]
        assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_the_live_procedure_replaces_nothing_when_an_output_is_missing(tmp_path: Path) -> None:
    etc, stubs = tmp_path / "etc", tmp_path / "bin"
    (etc / "wg-mesh").mkdir(parents=True)
    (etc / "wg-mesh" / "private.key").write_text("the-old-key")
    stubs.mkdir()
    (stubs / "pulumi").write_text("#!/bin/sh\necho 'error: no stack named prod' >&2\nexit 255\n")
    (stubs / "ssh").write_text(f'#!/bin/sh\nshift\nexec /bin/sh -c "$(printf %s "$1" | sed "s#/etc/#{etc}/#g")"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    subprocess.run(
        ["/bin/bash", "-c", live_procedure()], text=True, capture_output=True, check=False,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert (etc / "wg-mesh" / "private.key").read_text() == "the-old-key"
    assert not (etc / "wg-mesh" / "document.json").exists()


def single_host_section() -> str:
    page = PAGE.read_text()
    return page[page.index("## A single host") : page.index("## A site with a LAN")]


def test_the_single_host_example_is_a_single_host_of_the_mesh() -> None:
    """The page's YAML site, put in place of base()'s static site, validates and renders a host's wg0.conf."""
    from tests.test_config import base
    from tests.test_render import rendered
    from wg_mesh.plan.validate import load_mesh

    block = re.search(r"```yaml\n(.*?)```", single_host_section(), flags=re.DOTALL)
    assert block is not None
    (site,) = yaml.safe_load(block.group(1))
    raw = base()
    raw["sites"][2] = site
    cfg = load_mesh(raw)
    assert cfg.site(site["name"]).cidrs == [] and "ip_forward" not in rendered(cfg, site["name"])


def test_the_single_host_procedure_writes_the_config_and_no_sysctl(tmp_path: Path) -> None:
    block = re.search(r"```bash\n(.*?)```", single_host_section(), flags=re.DOTALL)
    assert block is not None
    text = block.group(1).replace("\\\n", " ")
    first, write = remote_commands(text)
    assert "apt-get install -y wireguard-tools" in first and "/etc/wireguard" not in first
    etc, stubs = tmp_path / "etc", tmp_path / "bin"
    (etc / "sysctl.d").mkdir(parents=True)
    stubs.mkdir()
    for tool in ("sysctl", "systemctl"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path}/calls\n')
        (stubs / tool).chmod(0o755)
    result = subprocess.run(
        ["/bin/sh", "-c", f"umask 022; {write.replace('/etc/', f'{etc}/')}"], input=SECRET, text=True,
        capture_output=True, check=False, env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (etc / "wireguard" / "wg0.conf").read_text() == SECRET
    assert stat.S_IMODE((etc / "wireguard" / "wg0.conf").stat().st_mode) == 0o600
    assert os.listdir(etc / "sysctl.d") == []  # a host's settings are its own
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["systemctl stop wg-quick@wg0", "systemctl enable --now wg-quick@wg0"]
