"""The fallback drill's pure parts (bench/lab/fallback.py): the one-run pmtu_seconds override, the outage arithmetic,
the report section. The drill itself needs root and about a minute of lab (two 3-tick switches of 5 s plus the
build): it is left to `sudo .venv/bin/python -m bench underlay --fallback`, not run here (CI's time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.cli import main
from bench.lab.fallback import adjust_pmtu, first_at, outage, with_pmtu_seconds
from bench.report.fallback import detection_window, section
from wg_mesh.gateway.agent import load_config
from wg_mesh.lab.clouds.live import live_configs
from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.machines import cloudinit
from wg_mesh.tools.stackfile import load

STACK = Path(__file__).resolve().parent.parent / "examples" / "underlay" / "Pulumi.underlay.yaml"


def rendered() -> dict[str, Any]:
    cfg = load(STACK)
    return render_artifacts(cfg, plan_lab(cfg, "wgl0f0b"), LabKeys.generate(cfg))


def test_the_override_sets_pmtu_seconds_in_every_agent_json_and_changes_nothing_else() -> None:
    artifacts = rendered()
    before = live_configs(artifacts)
    after = live_configs(adjust_pmtu(5)(artifacts))
    assert set(after) == set(before) == {"aws-use1", "gcp-use4", "vps-fra"}
    for site, config in after.items():
        assert config["pmtu_seconds"] == 5
        assert {k: v for k, v in config.items() if k != "pmtu_seconds"} == before[site]
        assert load_config(json.dumps(config)).pmtu_seconds == 5  # the agent's own reading of it
    for site, a in adjust_pmtu(5)(artifacts).items():
        old, new = yaml.safe_load(artifacts[site].user_data), yaml.safe_load(a.user_data)
        assert a.user_data.startswith("#cloud-config\n")
        assert {k: v for k, v in new.items() if k != "write_files"} == {
            k: v for k, v in old.items() if k != "write_files"
        }
        assert [f for f in new["write_files"] if f["path"] != "/etc/wg-mesh/agent.json"] == [
            f for f in old["write_files"] if f["path"] != "/etc/wg-mesh/agent.json"
        ]
        assert cloudinit.interpret(a.user_data).steps == cloudinit.interpret(artifacts[site].user_data).steps


def test_the_override_refuses_user_data_without_an_agent() -> None:
    with pytest.raises(LabError, match=r"agent\.json"):
        with_pmtu_seconds("#cloud-config\nwrite_files: []\n", 5)


def test_outage_longest_gap_lost_and_when_pings_resumed() -> None:
    # a reply every 10 ms, seq 0..99, then nothing for seq 100..1599 (15 s), then replies again
    replies = [(1000.0 + i * 0.01, i) for i in range(100)] + [(1016.0 + i * 0.01, 1600 + i) for i in range(50)]
    o = outage(replies, 1000.5, 1016.4)
    assert o["lost"] == 1500
    assert o["longest_gap_ms"] == pytest.approx(15010, abs=1)
    assert o["resumed_s"] == pytest.approx(15.5, abs=0.01)
    calm = outage(replies[:100], 1000.1, 1000.8)
    assert calm["lost"] == 0 and calm["longest_gap_ms"] == pytest.approx(10, abs=0.5)
    assert outage([], 0, 1) == {"replies": 0, "lost": None, "longest_gap_ms": None, "resumed_s": None}


def test_first_at_matches_fields_after_the_mark() -> None:
    events = [
        {"t": 5.0, "site": "a", "what": "metric", "value": "public"},  # before the mark: not this phase
        {"t": 12.0, "site": "b", "what": "endpoint", "value": "public"},
        {"t": 22.5, "site": "a", "what": "metric", "value": "public"},
    ]
    assert first_at(events, 10.0, site="a", what="metric", value="public") == 12.5
    assert first_at(events, 10.0, what="endpoint", value="public") == 2.0
    assert first_at(events, 10.0, site="b", what="metric", value="public") is None


def test_detection_window_is_the_ticks_less_one_to_the_ticks() -> None:
    assert detection_window(3, 5) == (10, 15)
    assert detection_window(3, 15) == (30, 45)


def sample() -> dict[str, Any]:
    site = {"metric_s": 13.2, "endpoint_s": 13.4}

    def phase(gap: float, lost: int, first: float | None) -> dict[str, Any]:
        return {"first_agent_switched_s": first, "both_endpoints_s": 13.6, "reached": True,
                "sites": {"aws-use1": site, "gcp-use4": {"metric_s": None, "endpoint_s": 13.6}},
                "pings": {"replies": 1, "lost": lost, "longest_gap_ms": gap, "resumed_s": 13.3}}  # fmt: skip

    return {
        "ok": True, "stack": "underlay", "duration_s": 70.0, "pmtu_seconds": 5, "default_pmtu_seconds": 15,
        "ticks": 3, "fault": "iptables -I FORWARD -i/-o pp1 -j DROP in aws-use1's VPC router namespace",
        "sites": {"A": "aws-use1", "B": "gcp-use4"}, "private_path": {"path": "use1-use4"},
        "steady": {"endpoints": {"aws-use1": "private", "gcp-use4": "private"}, "pings": {"lost": 0}},
        "cut": phase(13300.0, 1320, 13.2), "restore": phase(10.0, 0, 14.1),
        "stream": {"verified": True, "bytes": 70 << 20, "longest_stall_cut_ms": 13900.0,
                   "longest_stall_restore_ms": 0.0},
    }  # fmt: skip


def test_section_states_the_override_the_computed_default_and_what_is_not_modelled() -> None:
    text = section(sample())
    assert text.startswith("### 11.1 ")
    assert "`pmtu_seconds` is 5" in text and "computed, not measured" in text
    assert "30 to 45 s" in text and "10 to 15 s" in text
    assert "| 13.2 s | 13.6 s | 13.3 s | 13300 ms | 1320 | 13900 ms |" in text
    assert "no loss" in text  # the switch back lost nothing
    assert "BGP" in text and "LACP" in text
    assert "gcp-use4 metric **never**" in text


def test_cli_underlay_fallback_flag_runs_the_drill_and_writes_its_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bench.lab.fallback

    seen: list[str] = []
    monkeypatch.setattr(bench.lab.fallback, "run_fallback_bench", lambda cfg, log: seen.append("ran") or {"ok": True})
    assert main(["underlay", "--fallback", "--out", str(tmp_path)]) == 0
    assert seen == ["ran"] and (tmp_path / "underlay-fallback.json").exists()
