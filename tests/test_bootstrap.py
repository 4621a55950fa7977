"""The AWS gateway's bootstrap (wg_mesh/gateway/bootstrap.py): the agent's bundle is installed only when it is the one
the user data pins, whole files only, with retries until a timeout. (Against moto: tests/test_agent_sources.py.)"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import stat
from pathlib import Path

import pytest

from wg_mesh.gateway import bootstrap, ship
from wg_mesh.gateway.sources import FetchError
from wg_mesh.plan import userdata


def value_of(text: bytes) -> str:
    return base64.b64encode(gzip.compress(text)).decode()


def test_the_programs_bundle_decodes_to_the_shipped_modules() -> None:
    text, sha256 = ship.bundle("aws")
    files = bootstrap.decode(userdata.aws_agent_bundle(), sha256)
    assert files == {name: ship.compact(ship.module_source(name)) for name in ship.modules("aws")}
    assert bootstrap.encode(files) == (text, sha256)
    assert userdata.aws_agent_bundle() == userdata.aws_agent_bundle()  # zopfli: the same bytes every time


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("not base64!", "not base64 of gzip"),
        (base64.b64encode(b"not gzip").decode(), "not base64 of gzip"),
        (value_of(b'{"files":{"agent.py":"import os"}}'), "is not the pinned"),
    ],
    ids=["not-base64", "not-gzip", "foreign"],  # a gzip header holds the time: ids the same in every process
)
def test_a_damaged_or_foreign_bundle_is_refused(value: str, reason: str) -> None:
    _, sha256 = ship.bundle("aws")
    with pytest.raises(bootstrap.BundleError, match=reason):
        bootstrap.decode(value, sha256)


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
    answers: list[str | Exception] = [FetchError("no credentials yet"), FetchError("no credentials yet"), "garbage"]
    answers.append(value_of(text))
    logs: list[str] = []

    def fetch() -> str:
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
    def fetch() -> str:
        raise FetchError("AccessDeniedException")

    logs: list[str] = []
    assert bootstrap.run(fetch, "0" * 64, str(tmp_path), 0, logs.append, sleep=lambda s: None) == 1
    assert logs == ["bundle not installed: AccessDeniedException", "no agent bundle installed within 0 s"]
    assert not (tmp_path / bootstrap.PACKAGE).exists()


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"source": {"kind": "gcp"}}, "source.kind"),
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
    region, secret, sha256 = bootstrap.bundle_spec(config)
    assert (region, secret) == ("us-east-1", "wg-mesh/p/s/a/agent")
    assert bootstrap.decode(userdata.aws_agent_bundle(), sha256)
    assert "bundle_sha256" not in json.loads(ship.agent_config("a", ship.aws_source("us-east-1", "d", "/k")))
