"""Doctor's gateway-agent checks (delivery: live), on captured files: what each failure looks like to an operator."""

from __future__ import annotations

from tests.test_doctor import FakeHost
from wg_mesh.gateway.doctor import FAIL, OK, CommandResult
from wg_mesh.gateway.doctor import agent as doctor_agent

NOW = 1_800_000_000.0
ACTIVE = {"systemctl is-active wg-mesh-agent": CommandResult(0, "active\n")}
CONFIG = {doctor_agent.AGENT_CONFIG: '{"site": "aws-use1", "source": {"kind": "aws"}}'}


def textfile(applied: int = 7, desired: int = 7, success: int = 1, fetched: float = NOW - 5, **failures: int) -> str:
    lines = [
        "# HELP wgmesh_agent_applied_generation The generation of the document in effect.",
        "# TYPE wgmesh_agent_applied_generation gauge",
        f'wgmesh_agent_applied_generation{{site="aws-use1"}} {applied}',
        f'wgmesh_agent_desired_generation{{site="aws-use1"}} {desired}',
        f'wgmesh_agent_last_apply_success{{site="aws-use1"}} {success}',
        f'wgmesh_agent_last_fetch_timestamp_seconds{{site="aws-use1"}} {fetched}',
        'wgmesh_agent_peers{site="aws-use1"} 2',
        *(f'wgmesh_agent_apply_failures_total{{site="aws-use1",reason="{r}"}} {n}' for r, n in failures.items()),
    ]
    return "\n".join(lines) + "\n"


def checks(files: dict[str, str], outputs: dict[str, CommandResult] | None = None) -> dict[str, tuple[str, str]]:
    host = FakeHost(ACTIVE if outputs is None else outputs, files, now=NOW)
    return {c.check: (c.status, c.detail + " | " + c.hint) for c in doctor_agent.agent_checks(host)}


def test_no_agent_config_means_user_data_mode_and_no_checks() -> None:
    assert checks({}, outputs={}) == {}


def test_a_healthy_agent_passes_three_checks() -> None:
    found = checks({**CONFIG, doctor_agent.AGENT_METRICS: textfile()})
    assert {name: status for name, (status, _) in found.items()} == {
        "agent": OK,
        "agent-apply": OK,
        "agent-fetch": OK,
    }
    assert "generation 7, 2 peers" in found["agent-apply"][1]


def test_a_stopped_agent_fails_and_says_how_to_restart_it() -> None:
    stopped = {"systemctl is-active wg-mesh-agent": CommandResult(3, "inactive\n")}
    status, text = checks({**CONFIG, doctor_agent.AGENT_METRICS: textfile()}, stopped)["agent"]
    assert status == FAIL and "wg-mesh-agent is inactive" in text and "systemctl restart wg-mesh-agent" in text


def test_a_refused_document_names_the_reasons() -> None:
    found = checks({**CONFIG, doctor_agent.AGENT_METRICS: textfile(desired=9, success=0, parse=1, key=2)})
    status, text = found["agent-apply"]
    assert status == FAIL
    assert "key (2x), parse (1x)" in text and "running config is the previous one" in text


def test_a_lagging_generation_fails() -> None:
    status, text = checks({**CONFIG, doctor_agent.AGENT_METRICS: textfile(applied=7, desired=9)})["agent-apply"]
    assert status == FAIL and "applied generation 7, published 9" in text


def test_a_store_not_read_for_minutes_fails_with_a_hint_per_cloud() -> None:
    found = checks({**CONFIG, doctor_agent.AGENT_METRICS: textfile(fetched=NOW - 600)})
    status, text = found["agent-fetch"]
    assert status == FAIL and "10m00s ago" in text and "Secrets Manager" in text and "secretAccessor" in text


def test_missing_metrics_file_is_a_failure_not_a_traceback() -> None:
    found = checks(CONFIG)
    assert found["agent-apply"][0] == FAIL and "has written no metrics" in found["agent-apply"][1]


def test_textfile_parser_reads_labels_and_skips_comments() -> None:
    parsed = doctor_agent.parse_textfile(textfile(key=3))
    assert parsed["wgmesh_agent_apply_failures_total"] == [({"site": "aws-use1", "reason": "key"}, 3.0)]
    assert "# HELP" not in str(parsed)
