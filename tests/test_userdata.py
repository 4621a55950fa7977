"""User data per cloud: deterministic gzip for AWS, the clouds' size limits known to validate and the program."""

from __future__ import annotations

import base64
import gzip
import hashlib
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import meshgen
from wg_mesh.config import ConfigError
from wg_mesh.plan import topology, userdata
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import load

REPO = Path(__file__).resolve().parent.parent


@given(st.binary(max_size=5000))
@settings(max_examples=40, deadline=None)
def test_gzip_roundtrip_any_bytes(data: bytes) -> None:
    assert gzip.decompress(userdata.aws_gzip_bytes(data)) == data


@given(st.lists(st.sampled_from(["[Peer]\n", "AllowedIPs = 10.", "a", "b", "\x00", "é", "x" * 300]), max_size=400))
@settings(max_examples=40, deadline=None)
def test_gzip_roundtrip_repetitive_text(parts: list[str]) -> None:
    data = "".join(parts).encode()
    packed = userdata.aws_gzip_bytes(data)
    assert gzip.decompress(packed) == data
    assert zlib.decompress(packed[10:-8], wbits=-15) == data  # a plain raw DEFLATE stream as well


def test_gzip_is_deterministic_and_fixed() -> None:
    """The same text, the same bytes: here, in another interpreter, and as pinned (a change to the encoder
    changes every AWS gateway's user data, so it must show up in review)."""
    text = (REPO / "Pulumi.prod.yaml").read_bytes()
    packed = userdata.aws_gzip_bytes(text)
    assert packed[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03"  # no name, mtime 0
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from wg_mesh.plan import userdata; "
         "sys.stdout.buffer.write(userdata.aws_gzip_bytes(sys.stdin.buffer.read()))"],
        input=text, capture_output=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    assert other == packed
    assert len(packed) < len(text) * 0.7
    assert hashlib.sha256(userdata.aws_gzip_bytes(b"wg-mesh " * 100 + bytes(range(256)))).hexdigest() == PINNED


PINNED = "36f5d06ea9b7e2b8a284b213ba8a70049d88cceeb2b3f259c981cd90aff869d7"


def test_aws_user_data_base64_is_gzip_of_the_text() -> None:
    text = "#cloud-config\n" + "packages: [wireguard-tools]\n" * 50
    packed = base64.b64decode(userdata.aws_user_data_base64(text))
    assert gzip.decompress(packed).decode() == text and len(packed) < len(text)


def test_aws_user_data_over_the_limit_is_refused() -> None:
    random = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(700))  # 22 KB that does not compress
    noise = base64.b64encode(random).decode()
    with pytest.raises(ValueError, match="over EC2's 16384-byte limit"):
        userdata.aws_user_data_base64(noise)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_estimate_is_not_below_what_a_real_gateway_sends(stack: str) -> None:
    from wg_mesh.plan import render, wgkey

    cfg = load(REPO / f"Pulumi.{stack}.yaml")
    directory = {
        s.name: topology.PeerAddress(f"203.0.113.{i + 1}", wgkey.public_key(wgkey.generate_private_key()))
        for i, s in enumerate(cfg.sites)
    }
    for site in cfg.sites:
        conf = render.wg_quick_conf(topology.interface_plan(cfg, site.name, directory), wgkey.generate_private_key())
        text = userdata.render_user_data(cfg, site.name, conf, directory)
        real = len(userdata.aws_gzip(text)) if site.cloud == "aws" else len(text.encode())
        estimate = userdata.estimated_size(cfg, site.name)
        if site.cloud == "aws":
            assert estimate >= real - 32, site.name  # random keys: a few bytes of compression noise
        elif site.cloud == "gcp":
            assert estimate >= real, site.name  # plain text with the longest addresses


def test_validate_knows_the_aws_limit() -> None:
    crossing = meshgen.user_data_crossing(160, "aws_user_data_bytes", userdata.AWS_USER_DATA_LIMIT)
    assert crossing is not None and 64 < crossing < 160  # far past the ~17 sites of plain text
    load_mesh(meshgen.generate_mesh(crossing - 8, raised_quotas=True))
    with pytest.raises(ConfigError) as caught:
        load_mesh(meshgen.generate_mesh(crossing, raised_quotas=True))
    (problem,) = caught.value.problems
    assert problem.startswith("sites[") and "EC2's limit is 16384" in problem


def test_gcp_limit_is_a_metadata_value() -> None:
    cfg = load_mesh(meshgen.generate_mesh(16))
    found = userdata.largest(cfg, "gcp")
    assert found is not None and 0 < found[2] < userdata.GCP_METADATA_VALUE_LIMIT
    assert userdata.largest(cfg.model_copy(update={"sites": [s for s in cfg.sites if s.cloud != "gcp"]}), "gcp") is None


@pytest.mark.skipif(not Path("/usr/lib/python3/dist-packages/cloudinit").is_dir(), reason="cloud-init not installed")
def test_cloud_init_reads_the_gzipped_user_data_of_the_program(tmp_path: Path) -> None:
    """cloud-init's own user-data reader (the path EC2 user data takes) turns our gzip back into the #cloud-config."""
    from wg_mesh.plan import render, wgkey

    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = {
        s.name: topology.PeerAddress(f"203.0.113.{i + 1}", wgkey.public_key(wgkey.generate_private_key()))
        for i, s in enumerate(cfg.sites)
    }
    conf = render.wg_quick_conf(topology.interface_plan(cfg, "aws-use1", directory), wgkey.generate_private_key())
    text = userdata.render_user_data(cfg, "aws-use1", conf, directory)
    (tmp_path / "user-data.b64").write_text(userdata.aws_user_data_base64(text))
    read = (
        "import base64, sys; from cloudinit import user_data; "
        "raw = base64.b64decode(open(sys.argv[1]).read()); "
        "sys.stdout.buffer.write(user_data.convert_string(raw).get_payload(decode=True))"
    )
    result = subprocess.run(
        ["/usr/bin/python3", "-c", read, str(tmp_path / "user-data.b64")], capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == text


def test_every_unit_the_user_data_sets_up_is_checked_last_on_every_cloud() -> None:
    """cloud-init judges runcmd by its last command: it must check wg0 and the metrics units, with the cloud's
    own steps (AWS's readiness mark) combined in, not dropped."""
    import yaml

    from wg_mesh.plan import inputpolicy, metrics, render, wgkey

    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = {
        s.name: topology.PeerAddress(f"198.51.100.{i + 1}", wgkey.public_key(wgkey.generate_private_key()))
        for i, s in enumerate(cfg.sites)
    }
    for site in cfg.sites:
        plan = topology.interface_plan(cfg, site.name, directory)
        text = userdata.render_user_data(cfg, site.name, render.wg_quick_conf(plan, "(key)"), directory)
        last = yaml.safe_load(text)["runcmd"][-1]
        assert last == render.units_active_check(
            ["wg-quick@wg0", inputpolicy.UNIT_NAME, f"{metrics.UNIT_NAME}.timer", metrics.NODE_EXPORTER_SERVICE]
        )


def live_texts() -> dict[str, str]:
    from wg_mesh.plan import live

    cfg = load(REPO / "Pulumi.prod.yaml")
    assert cfg.delivery == "live"
    return {
        site.name: userdata.render_live_user_data(
            cfg,
            site.name,
            live.agent_source(site, "wg-mesh", "prod"),
            trust=userdata.estimate_trust(cfg, site, "wg-mesh", "prod"),
        )
        for site in cfg.sites
    }


@pytest.mark.skipif(not Path("/usr/bin/cloud-init").exists(), reason="cloud-init not installed")
def test_live_user_data_passes_cloud_init_schema_and_reads_back_from_its_gzip(tmp_path: Path) -> None:
    for name, text in live_texts().items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        done = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stdout, done.stderr)
    text = live_texts()["aws-use1"]
    (tmp_path / "user-data.b64").write_text(userdata.aws_user_data_base64(text))
    read = (
        "import base64, sys; from cloudinit import user_data; "
        "raw = base64.b64decode(open(sys.argv[1]).read()); "
        "sys.stdout.buffer.write(user_data.convert_string(raw).get_payload(decode=True))"
    )
    result = subprocess.run(["/usr/bin/python3", "-c", read, str(tmp_path / "user-data.b64")], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == text


@pytest.mark.skipif(not Path("/usr/lib/python3/dist-packages/cloudinit").is_dir(), reason="cloud-init not installed")
def test_cloud_init_writes_the_gcp_bundle_file_as_the_bundle_bytes(tmp_path: Path) -> None:
    """cloud-init's own write_files module (the system's, run by its python3) writes the GCP user data's bundle entry
    to disk as exactly the program's bzip2 bundle, the bytes the bootstrap reads and checks against agent.json's pin."""
    import grp
    import os
    import pwd

    import yaml

    from wg_mesh.gateway import ship

    files = {f["path"]: f for f in yaml.safe_load(live_texts()["gcp-euw3"])["write_files"]}
    owner = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"  # root's needs root
    entry = {**files[ship.BUNDLE_FILE], "path": str(tmp_path / "bundle.json.bz2"), "owner": owner}
    (tmp_path / "entry.yaml").write_text(yaml.safe_dump([entry]))
    write = (
        "import sys, yaml; from cloudinit.config import cc_write_files as w; "
        f"w.write_files('write_files', yaml.safe_load(open(sys.argv[1])), {owner!r})"
    )
    done = subprocess.run(["/usr/bin/python3", "-c", write, str(tmp_path / "entry.yaml")], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "bundle.json.bz2").read_bytes() == ship.bundle_value("gcp")


def test_live_user_data_checks_the_agent_last_and_ships_the_scripts_as_written() -> None:
    import yaml

    from wg_mesh.gateway import readymark, ship
    from wg_mesh.plan import inputpolicy, metrics, render

    for name, text in live_texts().items():
        cloud_init = yaml.safe_load(text)
        files = {f["path"]: f for f in cloud_init["write_files"]}
        assert cloud_init["runcmd"][-1] == render.units_active_check(
            [
                "wg-quick@wg0",
                inputpolicy.UNIT_NAME,
                ship.UNIT_NAME,
                f"{metrics.UNIT_NAME}.timer",
                metrics.NODE_EXPORTER_SERVICE,
            ]
        )
        # Plain text, the repo's sources without comments and docstrings (ship.compact; tests/test_agent_ship.py
        # shows the code is the same), no encoding: the AWS gzip covers the whole user data.
        script = files[metrics.SCRIPT_PATH]
        assert "encoding" not in script and script["content"] == metrics.shipped_source(), name
        if name != "vps-fra":
            ready = files[userdata.READY_SCRIPT_PATH]
            source = Path(readymark.__file__).read_text()
            assert "encoding" not in ready and ready["content"] == ship.compact(source), name
        assert render.WG_CONF_PATH not in files and metrics.MAPPING_PATH not in files


def test_an_aws_agent_brings_its_botocore_even_without_the_readiness_step() -> None:
    """The AWS source and bootstrap read the stores with Ubuntu's python3-botocore. The readiness mark needs it too,
    but the lab renders user data without that step (cloud_steps=False): the booted lab's AWS gateway then failed
    `No module named 'botocore'`. The agent names its own package; a package two steps need is installed once."""
    import yaml

    from wg_mesh.plan import live

    cfg = load(REPO / "Pulumi.prod.yaml")
    for cloud_steps in (True, False):
        texts = {
            s.name: userdata.render_live_user_data(
                cfg,
                s.name,
                live.agent_source(s, "wg-mesh", "prod"),
                trust=userdata.estimate_trust(cfg, s, "wg-mesh", "prod"),
                cloud_steps=cloud_steps,
            )
            for s in cfg.sites
        }
        packages = {name: yaml.safe_load(text)["packages"] for name, text in texts.items()}
        assert packages["aws-use1"].count(userdata.READY_PACKAGE) == 1, (cloud_steps, packages)
        assert userdata.READY_PACKAGE not in packages["vps-fra"]
