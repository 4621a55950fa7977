"""docs/reference/metrics.md: every metric a gateway exports (name, type, help) and every alert (expr, for,
severity, summary), from the METRICS tables of the code that exports them and from wg_mesh.tools.monitoring's rules."""

from __future__ import annotations

from types import ModuleType

from refdocs import md
from wg_mesh.config import MeshConfig
from wg_mesh.gateway import agent, apply, fallback, ha_run, pmtu, reresolve, wgmetrics
from wg_mesh.tools import monitoring

SOURCE = "the exporters' `METRICS` tables and wg_mesh/tools/monitoring.py"
# (module, title, when it is exported)
EXPORTERS: tuple[tuple[ModuleType, str, str], ...] = (
    (wgmetrics, "wg-mesh-metrics", "every gateway: the metrics script, run by a systemd timer every 15 s"),
    (agent, "wg-mesh-agent", "`delivery: live`: the agent's document, fetches and applies"),
    (apply, "wg-mesh-agent: applying", "`delivery: live`: rollbacks of a failed apply"),
    (pmtu, "wg-mesh-agent: path MTU", "`delivery: live`: the path-MTU monitor, per peer"),
    (fallback, "wg-mesh-agent: private paths", "`private_paths`: which endpoint a private-path peer uses"),
    (ha_run, "wg-mesh-agent: high availability", "`gateways: 2`: the HA controller"),
    (
        reresolve,
        "wg-mesh-reresolve",
        "peers of a DNS-named static site: the agent's thread, or a timer in user-data mode",
    ),
)
# A mesh of two sites, to show the recording rules' shape (their topology series repeat per site and peer).
EXAMPLE = {
    "overlay_cidr": "10.99.0.0/24",
    "sites": [
        {"name": "a", "cloud": "static", "overlay_ip": "10.99.0.1", "cidrs": ["10.1.0.0/16"], "endpoint": "192.0.2.1"},
        {"name": "b", "cloud": "static", "overlay_ip": "10.99.0.2", "cidrs": ["10.2.0.0/16"], "endpoint": "192.0.2.2"},
    ],
}


def _recording_rules() -> list[list[str]]:
    rules = monitoring.rules(MeshConfig.model_validate(EXAMPLE))
    rows, seen = [], set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule and rule["record"] not in seen:
                seen.add(rule["record"])
                rows.append([md.code(rule["record"]), group["name"], md.code(rule["expr"])])
    return rows


def render() -> str:
    lines = md.header("Metrics and alerts", SOURCE)
    lines += [
        "Every gateway exports these through node-exporter's textfile collector (TCP `exporter_port`, open to",
        "`monitoring_cidrs`). `wg-mesh monitoring --stack NAME --out DIR` writes the recording rules and alerts below",
        "for a stack, with a scrape job.",
        "",
        "## Metrics",
        "",
    ]
    for module, title, when in EXPORTERS:
        rows = [[md.code(name), kind, help_text] for name, (kind, help_text) in module.METRICS.items()]
        lines += [f"### {title}", "", f"{when[0].upper()}{when[1:]} (`{module.__name__}`).", ""]
        lines += md.table(("metric", "type", "help"), rows)
    lines += [
        "## Recording rules",
        "",
        "The topology group has one series per site and one per site and peer (`vector(1)` with their labels).",
        "",
        *md.table(("series", "group", "expr"), _recording_rules()),
        "## Alerts",
        "",
    ]
    alerts = monitoring.alerts(MeshConfig.model_validate(EXAMPLE).dynamic_silence())
    lines += md.table(
        ("alert", "severity", "for", "summary"),
        [[f"[{a.name}](#{a.name.lower()})", a.severity, a.for_ or "—", a.summary] for a in alerts],
    )
    for alert in alerts:
        lines += [f"### {alert.name}", "", alert.description, ""]
        lines += [f"Severity `{alert.severity}`, for `{alert.for_ or '0s'}`.", ""]
        lines += md.fenced(alert.expr, "promql")
    return md.page(lines)
