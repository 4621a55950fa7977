"""agent.json, the trust anchor, read as strictly as a document (issue 33 items 6 and 9; wg_mesh.gateway.agentconfig):
hostile and broken files refused with one line naming the field, never a traceback, and the agent then exits 2
without writing anything. On main (58f58f7) an unknown field was silently accepted, the interface name went unchecked
into every argv, and a deeply nested file was a RecursionError.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from tests.agent_fake import TRUST_JSON
from wg_mesh.config import sites
from wg_mesh.gateway import ship, trust
from wg_mesh.gateway.agent import main
from wg_mesh.gateway.agentconfig import load_config

AWS = ship.aws_source("us-east-1", "wg-mesh/prod/aws-use1/document", "/wg-mesh/prod/aws-use1/private-key")
DOC_SECRET, KEY_SECRET = "projects/p/secrets/d/versions/latest", "projects/p/secrets/k/versions/latest"
HA = {"cloud": "aws", "gateway": "a", "health_port": 9181, "region": "us-east-1", "lease_table": "t",
      "allocation_id": "eipalloc-1", "route_table_ids": ["rtb-1"]}  # fmt: skip


def good(**changes: Any) -> dict[str, Any]:
    """aws-use1's agent.json as the program writes it (ship.agent_config), with `changes`."""
    return json.loads(ship.agent_config("aws-use1", AWS, trust=TRUST_JSON)) | changes


def edited(path: str, value: object) -> dict[str, Any]:
    """good() with the field at dotted `path` set to `value`."""
    raw = good(ha=dict(HA))
    *parents, last = path.split(".")
    here = raw
    for key in parents:
        here = here[key]
    here[last] = value
    return raw


DEEP = '{"site": ' + "[" * 100_000 + "]" * 100_000 + "}"
CASES: dict[str, tuple[str, str]] = {  # name -> (agent.json text, what the refusal names)
    "an unknown top-level field": (json.dumps(good(hooks=["id"])), "unknown field 'hooks'"),
    "an unknown source field": (json.dumps(edited("source.endpoint_url", "http://evil")), "unknown field"),
    "an unknown ha field": (json.dumps(edited("ha.post_claim", "id")), "ha: unknown field 'post_claim'"),
    "an unknown trust field": (json.dumps(edited("trust.extra_keys", [])), "trust: unknown field"),
    "100,000-deep nesting": (DEEP, "nested deeper than"),
    "a 300 KiB file": (json.dumps(good(site="a" * 300 * 1024)), "bytes, more than"),
    "a duplicate key": (json.dumps(good())[:-1] + ', "site": "gcp-euw3"}', "a key appears twice"),
    "NaN": (json.dumps(good()).replace('"poll_seconds": 10', '"poll_seconds": NaN'), "NaN is not JSON"),
    "not ASCII": (json.dumps(good(site="aws-use\u0661"), ensure_ascii=False), "not ASCII"),
    "interface with a shell word": (json.dumps(good(interface="wg0; reboot")), "interface"),
    "interface that is an option": (json.dumps(good(interface="-wg0")), "interface"),
    "interface with a slash": (json.dumps(good(interface="wg0/../x")), "interface"),
    "interface of 16 characters": (json.dumps(good(interface="w" * 16)), "interface"),
    "interface empty": (json.dumps(good(interface="")), "interface"),
    "site not a DNS label": (json.dumps(good(site="AWS use1")), "site"),
    "a newline in a string": (json.dumps(edited("source.document_secret", "a\nb")), "source.document_secret"),
    "a string of 2000 characters": (json.dumps(edited("source.document_secret", "s" * 2000)), "document_secret"),
    "a list of 2000 items": (json.dumps(edited("ha.route_table_ids", ["rtb-1"] * 2000)), "route_table_ids"),
    "poll_seconds a bool": (json.dumps(good(poll_seconds=True)), "poll_seconds"),
    "poll_seconds 0": (json.dumps(good(poll_seconds=0)), "poll_seconds"),
    "a region that is not one": (json.dumps(edited("source.region", "us-east-1; id")), "source.region"),
    "a relative file path": (
        json.dumps(good(source=ship.file_source("document.json"))),
        "absolute paths",
    ),
    "bundle_sha256 not hex": (json.dumps(good(bundle_sha256="z" * 64)), "bundle_sha256"),
    "a relative bundle_file": (
        json.dumps(good(source=ship.gcp_source(DOC_SECRET, KEY_SECRET, bundle_file="lib/a.bz2"))),
        "source.bundle_file",
    ),
    "a bundle_file on an AWS source": (json.dumps(edited("source.bundle_file", "/b.bz2")), "unknown field"),
    "trust.cloud not a kind": (json.dumps(edited("trust.cloud", "azure")), "trust.cloud"),
    "trust.cloud gcp with an aws source": (json.dumps(edited("trust.cloud", "gcp")), "source.kind"),
    "trust.cloud static with an aws HA": (
        json.dumps(edited("trust.cloud", "static") | {"source": ship.file_source()}),
        "ha.cloud",
    ),
}


def test_the_program_writes_what_the_agent_reads() -> None:
    config = load_config(json.dumps(good(ha=dict(HA))))
    assert config.interface == "wg0" and config.trust is not None and config.trust.cloud == "aws"
    assert config.ha is not None and config.ha.allocation_id == "eipalloc-1"


@pytest.mark.parametrize("name", CASES)
def test_a_hostile_agent_json_is_refused_naming_the_field(name: str) -> None:
    text, needle = CASES[name]
    with pytest.raises(ValueError) as caught:  # ValueError only: no RecursionError, KeyError, TypeError
        load_config(text)
    assert needle in str(caught.value), caught.value
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["100,000-deep nesting", "an unknown top-level field", "interface with a shell word"])
def test_the_agent_exits_2_and_writes_nothing(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.json"
    config.write_text(CASES[name][0])
    root = tmp_path / "root"
    assert main(["--config", str(config), "--once", "--timeout", "0", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"wg-mesh-agent: {config}: ") and "Traceback" not in err and len(err.splitlines()) == 1
    assert not root.exists()


def test_the_site_kinds_are_the_configs() -> None:
    models = typing.get_args(typing.get_args(sites.Site)[0])
    assert set(trust.CLOUDS) == {typing.get_args(m.model_fields["cloud"].annotation)[0] for m in models}
