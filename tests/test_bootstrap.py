"""A live gateway's bootstrap (wg_mesh/gateway/bootstrap.py): the agent's bundle is installed only when it is the one
the user data pins, whole files only; from an AWS secret with retries until a timeout (against moto:
tests/test_agent_sources.py), from the GCP user data's bundle file once."""

from __future__ import annotations

import base64
import bz2
import gzip
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from wg_mesh.gateway import bootstrap, ship
from wg_mesh.gateway.sources import FetchError


def value_of(text: bytes) -> bytes:
    return bz2.compress(text, 9)


def test_the_programs_bundle_decodes_to_the_shipped_modules() -> None:
    """The round trip: what the SecretVersion's `secret_binary` input holds, decoded from base64 as the provider does
    (terraform-provider-aws: inttypes.Base64Decode), is the SecretBinary botocore hands the bootstrap (bytes), and
    the bootstrap decodes it to exactly the modules the program bundled, under the pin of the user data."""
    text, sha256 = ship.bundle("aws")
    stored = base64.b64decode(ship.bundle_base64("aws"), validate=True)
    assert stored == ship.bundle_value("aws") == bootstrap.pack(text)
    files = bootstrap.decode(stored, sha256)
    assert files == {name: ship.compact(ship.module_source(name)) for name in ship.modules("aws")}
    assert bootstrap.encode(files) == (text, sha256)


def test_bzip2_gives_the_bytes_it_gave_when_this_was_written() -> None:
    """The value must not depend on the machine that runs `pulumi up` (another value is a new secret version on every
    run from it, and replaces every GCP gateway, whose user data holds it): libbzip2 1.0.8 (Debian 12's, and the venv's)
    gives these bytes for this sample, and bundle_value checks that it still does before it packs anything."""
    sample = json.dumps({"files": {f"m{i}.py": f"def f{i}(x):\n    return x * {i}\n" * 40 for i in range(30)}}).encode()
    digest = "710ba173393390f00460e5dcc9afc7cd1453cff004dfb9e3bc5ea2a6bd8527b2"  # as first measured, on 2026-12-04
    assert hashlib.sha256(value_of(sample)).hexdigest() == digest
    assert (ship.bzip2_sample(), ship.BZIP2_REFERENCE) == (sample, digest) and ship.bzip2_is_reference()


def test_a_bz2_that_packs_otherwise_makes_no_bundle_and_validate_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another libbzip2's bytes would replace every GCP gateway: refused with the reason, and `validate` lists it for
    the GCP site instead of a traceback."""
    from tests.stacks import REPO
    from wg_mesh.config import ConfigError
    from wg_mesh.tools.stackfile import load

    monkeypatch.setattr(ship, "bzip2_is_reference", lambda: False)
    ship.bundle_value.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"compresses differently from libbzip2 1\.0\.8"):
            ship.bundle_value("gcp")
        with pytest.raises(ConfigError, match="gcp-euw3's gateway user data cannot be made: this Python's bz2"):
            load(REPO / "Pulumi.prod.yaml")
    finally:
        ship.bundle_value.cache_clear()


def hostile(kind: str) -> bytes | str:
    """A bundle secret's value that is not the pinned bundle, of each kind the bootstrap must refuse."""
    text, _ = ship.bundle("aws")
    good = value_of(text)
    return {
        "string": base64.b64encode(good).decode(),  # a SecretString (an older wg-mesh's bundle was one)
        "gzip": gzip.compress(text),  # the older format's bytes
        "empty": b"",
        "oversized": good + bytes(bootstrap.VALUE_LIMIT),  # more than Secrets Manager holds: not from it
        "truncated": good[: len(good) // 2],
        "damaged": good[:100] + bytes(b ^ 0xFF for b in good[100:200]) + good[200:],
        "trailing": good + value_of(b"{}"),  # a second stream
        "bomb": value_of(bytes(bootstrap.TEXT_LIMIT + 1)),  # 45 bytes that expand past the bound
        "foreign": value_of(b'{"files":{"agent.py":"import os"}}'),
    }[kind]


REFUSALS = [  # (hostile kind, the reason the bootstrap gives)
    ("string", "holds a SecretString, not a SecretBinary"),
    ("gzip", "not a bzip2 bundle"),
    ("empty", "not a bzip2 bundle"),
    ("oversized", f"over {bootstrap.VALUE_LIMIT} bytes"),
    ("truncated", "truncated bzip2"),
    ("damaged", "damaged bzip2"),
    ("trailing", "bytes after the bzip2 stream"),
    ("bomb", f"expands past {bootstrap.TEXT_LIMIT} bytes"),
    ("foreign", "is not the pinned"),
]


@pytest.mark.parametrize(("kind", "reason"), REFUSALS, ids=[kind for kind, _ in REFUSALS])
def test_a_damaged_foreign_or_outsized_bundle_is_refused_and_nothing_installed(
    kind: str, reason: str, tmp_path: Path
) -> None:
    """Refused by decode, and at boot: said in words, and the package directory is never created."""
    _, sha256 = ship.bundle("aws")
    value = hostile(kind)
    with pytest.raises(bootstrap.BundleError, match=reason):
        bootstrap.decode(value, sha256)
    logs: list[str] = []
    assert bootstrap.run(lambda: value, sha256, str(tmp_path), 0, logs.append, sleep=lambda s: None) == 1
    assert len(logs) == 2 and logs[0].startswith("bundle not installed: ") and reason in logs[0]
    assert not (tmp_path / bootstrap.PACKAGE).exists()


@pytest.mark.parametrize(
    "files",
    [{"../evil.py": "x"}, {"agent.sh": "x"}, {"agent.py": 1}, {}, None],
    ids=["traversal", "not-a-module", "not-text", "empty", "no-files"],
)
def test_a_pinned_bundle_must_still_hold_modules_only(files: object) -> None:
    text = json.dumps({"files": files}).encode()
    sha256 = hashlib.sha256(text).hexdigest()
    with pytest.raises(bootstrap.BundleError):
        bootstrap.decode(value_of(text), sha256)


def test_install_writes_whole_files_readable_by_all(tmp_path: Path) -> None:
    bootstrap.install({"a.py": "A = 1\n", "b.py": "B = 2\n"}, str(tmp_path))
    package = tmp_path / bootstrap.PACKAGE
    assert sorted(p.name for p in package.iterdir()) == ["a.py", "b.py"]  # no temporary file left
    assert stat.S_IMODE((package / "a.py").stat().st_mode) == 0o644
    bootstrap.install({"a.py": "A = 3\n"}, str(tmp_path))
    assert (package / "a.py").read_text() == "A = 3\n"


def test_run_retries_until_the_bundle_is_there_and_logs_each_problem_once(tmp_path: Path) -> None:
    text, sha256 = ship.bundle("file")
    answers: list[bytes | str | Exception] = [FetchError("no credentials yet"), FetchError("no credentials yet")]
    answers += [b"garbage", value_of(text)]
    logs: list[str] = []

    def fetch() -> bytes | str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert bootstrap.run(fetch, sha256, str(tmp_path), 60, logs.append, sleep=lambda s: None) == 0
    # the same problem twice is logged once
    assert [line.split(":")[0] for line in logs] == ["bundle not installed"] * 2 + [
        f"installed {len(ship.modules('file'))} modules of bundle {sha256[:12]}… in {tmp_path}/{bootstrap.PACKAGE}"
    ]
    assert (tmp_path / bootstrap.PACKAGE / "agent.py").exists()


def test_run_gives_up_at_the_timeout(tmp_path: Path) -> None:
    def fetch() -> bytes:
        raise FetchError("AccessDeniedException")

    logs: list[str] = []
    assert bootstrap.run(fetch, "0" * 64, str(tmp_path), 0.001, logs.append, sleep=lambda s: None) == 1
    assert logs == ["bundle not installed: AccessDeniedException", "no agent bundle installed within 0 s"]
    assert not (tmp_path / bootstrap.PACKAGE).exists()


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"source": {"kind": "gcp"}, "bundle_sha256": "0" * 64}, "source.bundle_file: missing"),
        ({"source": {"kind": "gcp", "bundle_file": "lib/b.bz2"}, "bundle_sha256": "0" * 64}, "not an absolute path"),
        ({"source": {"kind": "gcp", "bundle_file": "/b.bz2"}}, "bundle_sha256: missing"),
        ({"source": "gcp"}, "source: not an object"),
        ({"source": {"kind": "aws", "region": "us-east-1"}, "bundle_sha256": "0" * 64}, "source.bundle_secret"),
        ({"source": {"kind": "aws", "region": "r", "bundle_secret": "s"}}, "bundle_sha256: missing"),
        ({"source": {"kind": "aws", "region": "r", "bundle_secret": "s"}, "bundle_sha256": "abc"}, "not a SHA-256"),
    ],
)
def test_a_bad_agent_json_exits_2(tmp_path: Path, config: dict[str, object], problem: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(config))
    assert bootstrap.main(["--config", str(path), "--lib", str(tmp_path / "lib")]) == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "lib").exists()


def test_the_user_data_pins_the_bundle_the_program_stores() -> None:
    source = ship.aws_source("us-east-1", "d", "/k", "wg-mesh/p/s/a/agent")
    config = json.loads(ship.agent_config("a", source))
    spec = bootstrap.bundle_spec(config)
    assert (spec.region, spec.secret, spec.path) == ("us-east-1", "wg-mesh/p/s/a/agent", "")
    assert bootstrap.decode(ship.bundle_value("aws"), spec.sha256)
    assert "bundle_sha256" not in json.loads(ship.agent_config("a", ship.aws_source("us-east-1", "d", "/k")))


# --- the bundle file of a GCP user data (source.bundle_file) ---------------------------------------------------------


def gcp_user_data_bundle() -> tuple[dict[str, object], dict[str, object]]:
    """(the bundle file's write_files entry, agent.json) of prod's GCP gateway, from its rendered live user data."""
    import yaml

    from tests.stacks import REPO
    from wg_mesh.config import GcpSite
    from wg_mesh.plan import live, userdata
    from wg_mesh.tools.stackfile import load

    cfg = load(REPO / "Pulumi.prod.yaml")
    site = next(s for s in cfg.sites if isinstance(s, GcpSite))
    source = live.agent_source(site, "wg-mesh", "prod")
    text = userdata.render_live_user_data(cfg, site.name, source, trust=userdata.estimate_trust(cfg, site))
    files = {f["path"]: f for f in yaml.safe_load(text)["write_files"]}
    return files[ship.BUNDLE_FILE], json.loads(files[ship.CONFIG_PATH]["content"])


def boot_from_file(tmp_path: Path, value: bytes | None, sha256: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`wgmesh_gateway.bootstrap --config agent.json` as the GCP once command runs it, with `value` as the bundle file
    (None: none written); the exit code checked by the caller through the log lines it returns."""
    path = tmp_path / "bundle.json.bz2"
    if value is not None:
        path.write_bytes(value)
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"source": {"kind": "gcp", "bundle_file": str(path)}, "bundle_sha256": sha256}))
    code = bootstrap.main(["--config", str(config), "--lib", str(tmp_path / "lib"), "--timeout", "300"])
    lines = [line.removeprefix("wg-mesh-bootstrap: ") for line in capsys.readouterr().err.splitlines()]
    return [str(code), *lines]


def test_the_gcp_user_data_carries_the_bundle_its_agent_json_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The round trip a GCP gateway makes: the b64 write_files entry, decoded as cloud-init does, is the program's
    bundle value (the AWS secret's format), pinned by the agent.json next to it; the bootstrap installs the package."""
    entry, config = gcp_user_data_bundle()
    assert (entry["encoding"], entry["permissions"], entry["owner"]) == ("b64", "0644", "root:root")
    value = base64.b64decode(str(entry["content"]), validate=True)
    assert value == ship.bundle_value("gcp")
    source = config["source"]
    assert isinstance(source, dict) and source["bundle_file"] == ship.BUNDLE_FILE
    assert config["bundle_sha256"] == ship.bundle("gcp")[1]
    code, *logs = boot_from_file(tmp_path, value, str(config["bundle_sha256"]), capsys)
    assert code == "0" and len(logs) == 1 and logs[0].startswith(f"installed {len(ship.modules('gcp'))} modules")
    package = tmp_path / "lib" / bootstrap.PACKAGE
    assert {p.name: p.read_text() for p in package.iterdir()} == {
        name: ship.compact(ship.module_source(name)) for name in ship.modules("gcp")
    }


FILE_REFUSALS = [
    *[(kind, reason) for kind, reason in REFUSALS if kind not in ("string", "oversized")],  # a file holds bytes
    ("oversized", f"larger than {bootstrap.VALUE_LIMIT} bytes"),  # files.read_bytes stops reading there
    ("aws", "is not the pinned"),  # a whole, valid bundle: another cloud's (or release's)
    ("missing", "no such file"),
    ("symlink", "Too many levels of symbolic links"),  # not followed: O_NOFOLLOW
    ("fifo", "not a regular file"),  # opened without blocking, refused without waiting for a writer
    ("directory", "not a regular file"),
]


@pytest.mark.parametrize(("kind", "reason"), FILE_REFUSALS, ids=[kind for kind, _ in FILE_REFUSALS])
def test_a_damaged_foreign_or_outsized_bundle_file_is_refused_once_and_nothing_installed(
    kind: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file is read once (waiting would not mend it): exit 1 at once, the reason said, no package directory."""
    _, sha256 = ship.bundle("gcp")
    path = tmp_path / "bundle.json.bz2"
    value: bytes | None = None
    if kind == "aws":
        value = ship.bundle_value("aws")
    elif kind == "symlink":
        (tmp_path / "real").write_bytes(ship.bundle_value("gcp"))
        path.symlink_to(tmp_path / "real")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind != "missing":
        found = hostile(kind)
        assert isinstance(found, bytes)
        value = found
    logs = boot_from_file(tmp_path, value, sha256, capsys)
    assert logs[0] == "1" and len(logs) == 3, logs
    assert logs[1].startswith("bundle not installed: ") and reason in logs[1]
    assert logs[2] == "no agent bundle installed"
    assert not (tmp_path / "lib").exists()
