"""A lab assertion for the roaming-peer metrics (issue 24 item 4), run by the roam drill's lab test
(tests/test_lab_roam_drill.py) on its symmetric-NAT change, where every gateway's endpoint for the dynamic site moves:

    assert_the_metrics_follow_the_roam(cfg, drill_data(symmetric_step))

It costs no lab time: it feeds what the lab's gateways showed (`wg show wg0 endpoints` for the dynamic site before and
after its NAT moved it) through wg-mesh-metrics' own code, with each gateway's mapping as its user data renders it: the
site is `dynamic`, its endpoint label is the address WireGuard learnt, and the move is a roam at the run that saw it.
"""

from __future__ import annotations

from typing import Any

from tests.test_render import directory
from wg_mesh.config import MeshConfig
from wg_mesh.gateway import wgmetrics
from wg_mesh.plan import metrics

BEFORE, AFTER = 1_800_000_000.0, 1_800_000_015.0  # two runs of the metrics timer, 15 s apart


def exporter_view(cfg: MeshConfig, gateway: str, site: str, endpoints: list[str | None]) -> dict[str, float]:
    """The samples about `site` of the last of the runs on `gateway`, one per observed endpoint, 15 s apart."""
    addresses = directory(cfg)
    mapping = wgmetrics.parse_mapping(metrics.peer_mapping(cfg, gateway, addresses))
    key = addresses[site].public_key
    state: dict[str, wgmetrics.Seen] = {}
    text = ""
    for i, endpoint in enumerate(endpoints):
        now = BEFORE + 15 * i
        line = f"wg0\t{key}\t(none)\t{endpoint or '(none)'}\t(none)\t0\t0\t0\toff"
        snap = wgmetrics.Snapshot(now, tuple(wgmetrics.parse_dump(line)), None, None, None)
        state = wgmetrics.track(state, wgmetrics.observed(mapping, snap), now)
        text = wgmetrics.format_metrics(mapping, snap, state)
    return {
        name: float(value)
        for name, value in (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
        if f'peer_site="{site}"' in name
    }


def drill_data(step: dict[str, Any]) -> dict[str, Any]:
    """A roam drill step's record (wg_mesh.lab.drills.roamdrill) in this module's shape: each gateway that had an
    endpoint for the site before the change (a roam needs one), its endpoint before and after."""
    site, before = step["site"], step["endpoints_before"]
    seen = [g for g, endpoint in before.items() if endpoint is not None]
    return {
        "learnt": [{"gateway": g, "peer": site, "endpoint": before[g]} for g in seen],
        "roam": {"site": site, "learnt_after": [{"gateway": g, "endpoint": step["endpoints"][g]} for g in seen]},
    }


def assert_the_metrics_follow_the_roam(cfg: MeshConfig, data: dict[str, Any]) -> None:
    """`data`: the dynamic check's (its `learnt` rows before the move, `roam.learnt_after` after it)."""
    site = data["roam"]["site"]
    before = {row["gateway"]: row["endpoint"] for row in data["learnt"] if row["peer"] == site}
    after = {row["gateway"]: row["endpoint"] for row in data["roam"]["learnt_after"]}
    assert after and set(after) <= set(before), (before, after)
    for gateway, endpoint in after.items():
        got = exporter_view(cfg, gateway, site, [before[gateway], endpoint])
        info = [k for k in got if k.startswith("wgmesh_peer_info{") and 'kind="dynamic"' in k]
        assert len(info) == 1, (gateway, got)
        label = wgmetrics.endpoint_label(endpoint)
        assert label not in (None, wgmetrics.INVALID) and label != wgmetrics.endpoint_label(before[gateway]), endpoint
        shown = [k for k in got if k.startswith("wgmesh_peer_endpoint_info{")]
        assert shown == [k for k in shown if f'endpoint="{label}"' in k] and len(shown) == 1, (gateway, got)
        (roamed,) = [v for k, v in got.items() if k.startswith("wgmesh_peer_last_roam_timestamp_seconds{")]
        assert roamed == AFTER, (gateway, got)
