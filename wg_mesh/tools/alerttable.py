"""The alert table of the mesh's Prometheus rules: each alert's expression, thresholds, summary and what to do, and the
recorded series the alerts read (the topology's expectations, the throughput rates), which wg_mesh.tools.monitoring
renders into the rules file. Pure data: the same for every mesh but for its thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wg_mesh.config import MeshConfig, alerting
from wg_mesh.gateway import wgmetrics

JOB = "wg-mesh"  # the scrape job (wg_mesh.tools.monitoring.scrape_config) whose `up` the exporter alert reads
HANDSHAKE_STALE_SECONDS = wgmetrics.HANDSHAKE_STALE_SECONDS
NEVER_CONNECTED_FOR = "3m"  # a fresh gateway handshakes within seconds; 3 minutes of nothing is a fault
METRICS_STALE_SECONDS = 60  # four missed runs of the 15 s timer
SENDING_BYTES_PER_SECOND = 1024  # a peer "sends" above keepalives and handshakes (a few bytes per second)
RECEIVED_FRACTION = 0.1  # ... and the receiving side "gets nothing" below a tenth of that
RATE_WINDOW = "5m"
# delivery: live (wg_mesh.gateway.agent). Both clouds' agents poll their document secret every `poll_seconds` (10 s):
# a gateway that has not read its store for 3 minutes cannot follow the mesh any more.
AGENT_FETCH_STALE_SECONDS = 180
# A cloud gateway's document is signed again by the first `pulumi up` of every 30-day period and stays valid 60 to 90
# days (wg_mesh.plan.live.expires): 21 days left means no `up` for at least 39 days.
DOCUMENT_EXPIRY_WARNING_SECONDS = 21 * 86400
AGENT_LAG_FOR = "2m"  # the bound: applied generation behind the desired one for more than 2 minutes
AGENT_LOG = "journalctl -u wg-mesh-agent"
# Issue #14: fire within 2 minutes of a path shrinking: a probe every 15 s (agent.PMTU_SECONDS), a scrape and an
# evaluation every 15 s, and 1m of consecutive "small passes, full fails" (a single lost ping is not a black hole).
PATH_MTU_FOR = "1m"
# Issue 13 (docs/underlay.md 7): a private-path peer the agent moved to its public endpoint. Short outages of a path
# are what the fallback is for; one that lasts a quarter of an hour costs internet egress and wants its owner.
UNDERLAY_PUBLIC_FOR = "15m"

# HA sites (issue 11, docs/ha.md section 10): both gateways of a site export the per-peer series with the same `site`
# (they differ in `instance`, the scrape target); only the active one has tunnels, so the per-peer alerts drop the
# series of a gateway that says it is standby. A single gateway exports no wgmesh_ha_role: nothing is dropped.
NOT_STANDBY = "unless on (site, instance) (wgmesh_ha_role == 0)"
# Issue 24: a dynamic site's peers learn its address from its packets and cannot dial it: its silence has its own alert
# and threshold (dynamic_silence_alert_seconds, wg_mesh.config.alerting), and the handshake alerts about endpoints that
# do not answer leave it out. The kind is the gateway's own (its mapping: wgmesh_peer_info).
DYNAMIC_PEER = 'wgmesh_peer_info{kind="dynamic"}'
NOT_DYNAMIC = f"unless on (site, peer_site) {DYNAMIC_PEER}"
DEFAULT_DYNAMIC_SILENCE = alerting.default_silence(MeshConfig.model_fields["persistent_keepalive"].default)
HA_NO_ACTIVE_FOR = "15s"
HA_NO_STANDBY_FOR = "2m"
HA_FLAP_WINDOW = "15m"
HA_FLAP_CLAIMS = 2

# Recorded series (also what the dashboard may use).
EXPECTED_SITE = "site:wgmesh_expected"
FORWARDING_SITE = "site:wgmesh_forwards"  # the sites whose gateway forwards (not a single host: topology.forwards)
EXPECTED_PEER = "site_peer:wgmesh_expected"
RECEIVE_RATE = f"site_peer:wgmesh_peer_receive_bytes:rate{RATE_WINDOW}"
TRANSMIT_RATE = f"site_peer:wgmesh_peer_transmit_bytes:rate{RATE_WINDOW}"
SENT_BY_PEER_RATE = f"site_peer:wgmesh_peer_sent_by_peer_bytes:rate{RATE_WINDOW}"
DOCTOR = "sudo python3 -m wg_mesh.gateway.doctor"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    summary: str
    description: str
    severity: str = "critical"
    for_: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def duration(seconds: int) -> str:
    """Prometheus' duration notation: 460 -> 7m40s."""
    hours, rest = divmod(seconds, 3600)
    parts = [(hours, "h"), *zip(divmod(rest, 60), ("m", "s"), strict=True)]
    return "".join(f"{value}{unit}" for value, unit in parts if value) or "0s"


def alerts(dynamic_silence: int = DEFAULT_DYNAMIC_SILENCE) -> list[Alert]:
    """The alerts: the same for every mesh but for its thresholds (the topology enters through the recorded
    expectations); `dynamic_silence`: MeshConfig.dynamic_silence()."""
    return [
        Alert(
            "WgMeshHandshakeStale",
            f"(\n  (time() - wgmesh_peer_latest_handshake_seconds > {HANDSHAKE_STALE_SECONDS})\n"
            f"  and wgmesh_peer_latest_handshake_seconds > 0\n)\n{NOT_DYNAMIC}\n{NOT_STANDBY}",
            "{{ $labels.site }}: last handshake with {{ $labels.peer_site }} {{ $value | humanizeDuration }} ago",
            "WireGuard rekeys every 2 minutes while a tunnel is alive, so a handshake older than "
            f"{HANDSHAKE_STALE_SECONDS} s means the tunnel to {{{{ $labels.peer_site }}}} is down. "
            f"Check `sudo wg show wg0` on both gateways; run `{DOCTOR}` on {{{{ $labels.site }}}}.",
        ),
        Alert(
            "WgMeshPeerUnreachable",
            f"wgmesh_peer_latest_handshake_seconds == 0\n{NOT_DYNAMIC}\n{NOT_STANDBY}",
            "{{ $labels.site }} has never completed a handshake with {{ $labels.peer_site }}",
            "The endpoint of {{ $labels.peer_site }} does not answer: its UDP port is closed to "
            "{{ $labels.site }}, its public address changed, or the keys do not match. "
            f"Run `{DOCTOR}` on {{{{ $labels.site }}}}.",
            for_=NEVER_CONNECTED_FOR,
        ),
        Alert(
            "WgMeshDynamicSiteSilent",
            f"(\n  time() - wgmesh_peer_latest_handshake_seconds > {HANDSHAKE_STALE_SECONDS}\n"
            "  or wgmesh_peer_latest_handshake_seconds == 0\n)\n"
            f"and on (site, peer_site) {DYNAMIC_PEER}\n{NOT_STANDBY}",
            "{{ $labels.site }}: no handshake with the dynamic site {{ $labels.peer_site }} for over "
            f"{duration(dynamic_silence)}",
            "{{ $labels.peer_site }} has no fixed address (`endpoint: dynamic`): it dials {{ $labels.site }}, which "
            "learns its address from its packets and cannot dial it back. No handshake for over "
            f"{duration(dynamic_silence)} (a live session is renewed every 2 minutes; a site not heard since this "
            f"gateway's WireGuard started: {duration(dynamic_silence - HANDSHAKE_STALE_SECONDS)} after the start): "
            "the site is down or offline, its NAT or provider drops its UDP, or the firewall of {{ $labels.site }} "
            "does not admit its new address (its endpoint_ranges). "
            f"`{DOCTOR}` on {{{{ $labels.site }}}} shows its endpoint and last roam; on the site, "
            "`systemctl status wg-quick@wg0`. The threshold is the stack's dynamic_silence_alert_seconds.",
            for_=duration(dynamic_silence - HANDSHAKE_STALE_SECONDS),
        ),
        Alert(
            "WgMeshPeerMissing",
            f"(\n  {EXPECTED_PEER}\n  unless on (site, peer_site) wgmesh_peer_latest_handshake_seconds\n)\n"
            "and on (site) wgmesh_metrics_last_run_timestamp_seconds",
            "{{ $labels.site }} has no WireGuard peer for {{ $labels.peer_site }}",
            "The mesh topology expects {{ $labels.peer_site }} as a peer of {{ $labels.site }}, but the gateway's "
            "wg0 does not have it (WireGuard stopped, or a config that does not match the stack). "
            f"Run `{DOCTOR}` on {{{{ $labels.site }}}}.",
            for_="1m",
        ),
        Alert(
            "WgMeshForwardingDisabled",
            f"wgmesh_ip_forward_enabled == 0 and on (site) {FORWARDING_SITE}",  # a single host's 0 is right
            "{{ $labels.site }}: IP forwarding is off",
            "net.ipv4.ip_forward is 0 on the gateway of {{ $labels.site }}: handshakes can stay fresh while no "
            "traffic crosses the gateway. `sudo sysctl -w net.ipv4.ip_forward=1`, then find what turned it off "
            "(/etc/sysctl.d/).",
            for_="30s",
        ),
        Alert(
            "WgMeshInterfaceDown",
            "wgmesh_interface_up == 0",
            "{{ $labels.site }}: {{ $labels.interface }} is missing or down",
            "`sudo systemctl status wg-quick@{{ $labels.interface }}` and `journalctl -u "
            "wg-quick@{{ $labels.interface }}` on the gateway of {{ $labels.site }}.",
            for_="30s",
        ),
        Alert(
            "WgMeshRouteMissing",
            "wgmesh_route_present == 0\nunless on (site) wgmesh_interface_up == 0",
            "{{ $labels.site }}: no route sends {{ $labels.prefix }} ({{ $labels.peer_site }}) into "
            "{{ $labels.interface }}",
            "Traffic for {{ $labels.prefix }} leaves the gateway of {{ $labels.site }} another way (or is dropped). "
            f"`ip route get` on the gateway shows where it goes; run `{DOCTOR}`.",
            for_="1m",
        ),
        Alert(
            "WgMeshNoTrafficFromPeer",
            f"{RECEIVE_RATE}\n  < on (site, peer_site) ({RECEIVED_FRACTION} * {SENT_BY_PEER_RATE})\n"
            f"and on (site, peer_site) {SENT_BY_PEER_RATE} > {SENDING_BYTES_PER_SECOND}",
            "{{ $labels.site }} receives {{ $value | humanize }}B/s from {{ $labels.peer_site }}, which is sending",
            "{{ $labels.peer_site }} reports sending to {{ $labels.site }}, but {{ $labels.site }} receives less than "
            f"{RECEIVED_FRACTION:.0%} of it: packets are lost on the way (a firewall or NAT between the gateways, "
            "or a stale endpoint). Compare `sudo wg show wg0 transfer` on both gateways.",
            for_="2m",
        ),
        Alert(
            "WgMeshExporterDown",
            f'{EXPECTED_SITE} unless on (site) (up{{job="{JOB}"}} == 1)',
            "{{ $labels.site }}: Prometheus cannot scrape the gateway's node-exporter",
            "The gateway of {{ $labels.site }} is down, its node-exporter is stopped, or the firewall does not admit "
            "Prometheus (monitoring_cidrs, exporter_port). Without it, no other wg-mesh alert can fire for this site.",
            severity="warning",
            for_="1m",
        ),
        Alert(
            "WgMeshAgentApplyFailing",
            "wgmesh_agent_last_apply_success == 0",
            "{{ $labels.site }}: the gateway agent does not apply the mesh's desired configuration",
            "wg-mesh-agent on {{ $labels.site }} refused or failed to apply the document it read (the running "
            "configuration stays as it was): wgmesh_agent_apply_failures_total says why (parse, format, "
            "signature, scope, site, replay, expired, no_peers, invalid, generation, unsafe, state, key, apply; "
            "signature, scope, replay and unsafe: a forged or stale document, find who wrote the store). "
            f"`{AGENT_LOG}` on the gateway; then `pulumi up` again.",
            for_="1m",
        ),
        Alert(
            "WgMeshAgentGenerationLag",
            "wgmesh_agent_desired_generation != wgmesh_agent_applied_generation",
            "{{ $labels.site }}: the gateway runs an older mesh configuration than the one published",
            "The document published in the site's store (generation {{ $value }}) has not been applied for "
            f"{AGENT_LAG_FOR}: peers added, removed or rotated since are not in effect on {{{{ $labels.site }}}}. "
            f"`{AGENT_LOG}` on the gateway.",
            for_=AGENT_LAG_FOR,
        ),
        Alert(
            "WgMeshAgentStateLost",
            "wgmesh_agent_state_lost == 1",
            "{{ $labels.site }}: the gateway lost its replay floor and refuses every document",
            "wg-mesh-agent on {{ $labels.site }} cannot read /var/lib/wg-mesh/agent-state.json (deleted although the "
            "gateway applied documents before, truncated, not JSON, a directory or a symlink): it does not fall back "
            "to 0, so it refuses every document (reason state) and keeps the running wg0. Find out why the file "
            "changed; then `wg-mesh-agent --config /etc/wg-mesh/agent.json --reset-floor SERIAL` with the serial of "
            "the site's current document, or replace the gateway (docs/security.md, Freshness). "
            f"`{AGENT_LOG}` on the gateway.",
        ),
        Alert(
            "WgMeshDocumentExpiring",
            f"wgmesh_agent_document_expiry_timestamp_seconds > 0\n"
            f"and wgmesh_agent_document_expiry_timestamp_seconds - time() < {DOCUMENT_EXPIRY_WARNING_SECONDS}",
            "{{ $labels.site }}: the gateway's document expires within 21 days",
            "Cloud gateways apply only documents that have not expired (90 days from the start of the 30-day period "
            "in which `pulumi up` signed them; a stolen old document dies on its own). The running one expires soon: "
            "run `pulumi up` (any run in a new period signs every cloud document again). An expired running "
            "document keeps wg0 as it is, but a new gateway would refuse it (docs/security.md, Freshness).",
            severity="warning",
        ),
        Alert(
            "WgMeshAgentFetchStale",
            f"time() - wgmesh_agent_last_fetch_timestamp_seconds > {AGENT_FETCH_STALE_SECONDS}",
            "{{ $labels.site }}: the gateway agent has not read its store for {{ $value | humanizeDuration }}",
            "wg-mesh-agent on {{ $labels.site }} is stopped or cannot read the document (AWS: the instance role's "
            "access to its Secrets Manager secret; GCP: the metadata server; static: /etc/wg-mesh/document.json). "
            f"Mesh changes do not reach this gateway. `systemctl status wg-mesh-agent` and `{AGENT_LOG}`.",
            severity="warning",
        ),
        Alert(
            "WgMeshPathMtuBlackHole",
            'max without (size) (\n  wgmesh_path_probe_ok{size="small"} == 1\n'
            '  and on (site, peer_site) wgmesh_path_probe_ok{size="full"} == 0\n)',
            "{{ $labels.site }}: full-size packets to {{ $labels.peer_site }} vanish while small ones pass",
            "A path-MTU black hole: the internet path from {{ $labels.site }} toward {{ $labels.peer_site }} carries "
            "less than the tunnel's MTU + 60 bytes and drops ICMP 'fragmentation needed', so bulk TCP, UDP and QUIC "
            "stall while handshakes stay fresh. The agent lowers the route MTU to that peer (wgmesh_path_mtu_healed, "
            "wgmesh_path_mtu_bytes: what passes); for good, lower the mesh's `mtu`. "
            f"`{DOCTOR}` on {{{{ $labels.site }}}} names the size that passes.",
            for_=PATH_MTU_FOR,
        ),
        Alert(
            "WgMeshUnderlayOnInternet",
            'wgmesh_underlay_path{path="public"} == 1',
            "{{ $labels.site }} reaches {{ $labels.peer_site }} over the internet, not their private path",
            "The agent on {{ $labels.site }} moved the tunnel to {{ $labels.peer_site }} onto its public endpoint: "
            "neither the tunnel nor a direct ping of the peer's private address crossed the private path for 3 probes "
            "(wgmesh_underlay_fallbacks_total counts the moves; it moves back by itself once the path answers). The "
            "traffic still flows, encrypted, but over the internet: internet egress prices and its MTU. Check the "
            "interconnect / peering / VPN and its routes to the gateway subnets; "
            f"`{AGENT_LOG}` on {{{{ $labels.site }}}}.",
            for_=UNDERLAY_PUBLIC_FOR,
            severity="warning",
        ),
        Alert(
            "WgMeshHaNoActive",
            "sum by (site) (wgmesh_ha_role) == 0",
            "{{ $labels.site }}: neither gateway is active",
            "Both gateways of the HA site {{ $labels.site }} report standby: nobody forwards the site's traffic. "
            "Either both fail their health checks (wgmesh_ha_healthy; `curl http://GATEWAY:9181/healthz` says which "
            "check) or the arbiter is unreachable (AWS: the DynamoDB lease table; GCP: the Compute API). "
            f"`{AGENT_LOG}` on both gateways.",
            for_=HA_NO_ACTIVE_FOR,
        ),
        Alert(
            "WgMeshHaTwoActive",
            "sum by (site) (wgmesh_ha_role) > 1",
            "{{ $labels.site }}: both gateways say they are active",
            "Must never happen: only the gateway holding the site's address carries traffic, and the other one "
            "demotes itself when it sees that. A short overlap while one of them cannot reach the cloud API is "
            f"possible; if it lasts, `{AGENT_LOG}` on both and compare with the address holder in the cloud console.",
        ),
        Alert(
            "WgMeshHaNoHealthyStandby",
            "group by (site) (wgmesh_ha_role)\nunless on (site)\n"
            "  (wgmesh_ha_role == 0 and on (site, instance) wgmesh_ha_healthy == 1)",
            "{{ $labels.site }} runs without a healthy standby gateway",
            "The HA site {{ $labels.site }} has no standby that passes its health checks (stopped, unhealthy, or not "
            "scraped): the next failure of the active gateway is an outage. Look at the standby's "
            f"wgmesh_ha_healthy, `/healthz` and `{AGENT_LOG}`.",
            severity="warning",
            for_=HA_NO_STANDBY_FOR,
        ),
        Alert(
            "WgMeshHaFlapping",
            f"sum by (site) (increase(wgmesh_ha_failovers_total[{HA_FLAP_WINDOW}])) > {HA_FLAP_CLAIMS}",
            "{{ $labels.site }}: the active gateway changed {{ $value | humanize }} times in 15 minutes",
            "The gateways of {{ $labels.site }} keep handing over (wgmesh_ha_failovers_total by reason): a health "
            "check that flaps, a gateway that keeps restarting, or an arbiter that is intermittently unreachable. "
            f"`{AGENT_LOG}` on both gateways.",
            severity="warning",
        ),
        Alert(
            "WgMeshMetricsStale",
            f"time() - wgmesh_metrics_last_run_timestamp_seconds > {METRICS_STALE_SECONDS}",
            "{{ $labels.site }}: WireGuard metrics are {{ $value | humanizeDuration }} old",
            "wg-mesh-metrics.timer has not refreshed the textfile: `systemctl status wg-mesh-metrics.timer "
            "wg-mesh-metrics.service` on the gateway of {{ $labels.site }}.",
            severity="warning",
        ),
    ]
