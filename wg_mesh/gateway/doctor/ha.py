"""Doctor's check of an HA gateway (agent.json has an `ha` object; issue 11, docs/ha.md): its role, its own health
verdict and /healthz, the lease epoch and the claims it made, from what the agent exports (wg_mesh_ha.prom) and
serves (GET /healthz on ha.health_port). Who holds the address is the cloud's to say: the hint names the call.
On a standby, the per-peer handshake checks cannot pass by design (its peers have no endpoint): `standby_peer_checks`
turns their failures into skips. Standard library only.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from typing import Any

from wg_mesh.gateway.doctor.agent import AGENT_CONFIG, JOURNAL, parse_textfile
from wg_mesh.gateway.doctor.base import FAIL, OK, SKIP, WARN, Check, Host

HA_METRICS = "/var/lib/prometheus/node-exporter/wg_mesh_ha.prom"


def ha_config(host: Host) -> dict[str, Any] | None:
    try:
        raw = json.loads(host.read(AGENT_CONFIG))
    except (OSError, ValueError):
        return None
    ha = raw.get("ha") if isinstance(raw, dict) else None
    return ha if isinstance(ha, dict) else None


def _metrics(host: Host) -> dict[str, float]:
    try:
        samples = parse_textfile(host.read(HA_METRICS))
    except OSError:
        return {}
    values = {name: found[0][1] for name, found in samples.items() if found and name != "wgmesh_ha_failovers_total"}
    for labels, value in samples.get("wgmesh_ha_failovers_total", []):
        values[f"claims:{labels.get('reason', '?')}"] = value
    return values


def role(host: Host) -> str | None:
    """ "active" or "standby" for an HA gateway (from its metrics), None otherwise."""
    if ha_config(host) is None:
        return None
    value = _metrics(host).get("wgmesh_ha_role")
    return None if value is None else ("active" if value == 1 else "standby")


def _healthz(host: Host, port: int) -> tuple[str, str]:
    """(HTTP status, body) of the agent's /healthz, or ("", error)."""
    done = host.run(["curl", "-sS", "--max-time", "2", "-w", "\n%{http_code}", f"http://127.0.0.1:{port}/healthz"])
    if done.returncode != 0:
        return "", (done.stderr.strip() or f"curl exit {done.returncode}")[:200]
    body, _, code = done.stdout.rpartition("\n")
    return code.strip(), body.strip()


def ha_checks(host: Host) -> list[Check]:
    ha = ha_config(host)
    if ha is None:
        return []
    gateway, port = ha.get("gateway", "?"), int(ha.get("health_port", 9181))
    values = _metrics(host)
    if "wgmesh_ha_role" not in values:
        return [Check("ha", FAIL, f"gateway {gateway}: the agent has written no HA metrics ({HA_METRICS})", JOURNAL)]
    code, body = _healthz(host, port)
    active, healthy = values["wgmesh_ha_role"] == 1, values.get("wgmesh_ha_healthy") == 1
    claims = ", ".join(
        f"{k.split(':', 1)[1]} {v:.0f}" for k, v in sorted(values.items()) if k.startswith("claims:") and v
    )
    epoch = values.get("wgmesh_ha_lease_epoch", 0)
    facts = f"lease epoch {epoch:.0f}; claims: {claims or 'none'}; /healthz {code or '-'} {body}"
    holder = (
        "`aws ec2 describe-addresses --allocation-ids ...` (and the lease item in the DynamoDB table) say who holds it"
        if ha.get("cloud") == "aws"
        else "`gcloud compute addresses describe ...` (users) and `gcloud compute backend-services get-health ...`"
    )
    if active and healthy and code == "200":
        return [Check("ha", OK, f"gateway {gateway} is the active gateway and healthy ({facts})")]
    if active:
        return [Check("ha", FAIL, f"gateway {gateway} is active but not healthy ({facts})",
                      f"It will hand over (or has): {JOURNAL}; {holder}.")]  # fmt: skip
    if healthy and code == "503":
        return [
            Check("ha", OK, f"gateway {gateway} is the standby, healthy: it takes over if the active fails ({facts})")
        ]
    if not code:
        return [Check("ha", FAIL, f"gateway {gateway}: /healthz on port {port} does not answer ({body})", JOURNAL)]
    return [Check("ha", WARN if healthy else FAIL, f"gateway {gateway} is standby and cannot take over ({facts})",
                  f"Its site runs without a healthy standby (WgMeshHaNoHealthyStandby): {JOURNAL}.")]  # fmt: skip


def api_path_checks(host: Host) -> list[Check]:
    """AWS HA: whether this gateway reaches EC2 without a public address (docs/ha.md 5.5). The EC2 interface endpoint's
    private DNS makes the regional name resolve to private addresses inside the VPC; public ones mean a demoted
    gateway has no EC2 path until it gets a new public IPv4, minutes after the Elastic IP moved away."""
    ha = ha_config(host)
    if ha is None or ha.get("cloud") != "aws" or not isinstance(ha.get("region"), str):
        return []
    name = f"ec2.{ha['region']}.amazonaws.com"
    done = host.run(["getent", "ahostsv4", name])
    found = sorted({line.split()[0] for line in done.stdout.splitlines() if line.split()})
    try:
        private = bool(found) and all(ipaddress.IPv4Address(a).is_private for a in found)
    except ValueError:
        private = False
    if done.returncode != 0 or not found:
        return [Check("ha-api", WARN, f"{name} does not resolve here ({done.stderr.strip()[:120] or 'no answer'})",
                      "The agent cannot reach EC2: DNS of the VPC (docs/ha.md 5.5).")]  # fmt: skip
    if private:
        return [Check("ha-api", OK, f"{name} resolves to {', '.join(found)}: EC2 through a VPC endpoint")]
    return [Check("ha-api", WARN, f"{name} resolves to public addresses ({', '.join(found)}): no EC2 VPC endpoint",
                  "A demoted gateway reaches EC2 only once it has a new public IPv4 (minutes); a second failover in "
                  "that window cannot move the address or the routes. Add an EC2 interface endpoint with private DNS "
                  "reachable from the gateway subnets, and a DynamoDB gateway endpoint (docs/ha.md 5.5).")]  # fmt: skip


def standby_peer_checks(checks: list[Check], host: Host) -> list[Check]:
    """On a standby HA gateway, failed handshake checks are expected: skipped, with the reason."""
    if role(host) != "standby":
        return checks
    return [
        dataclasses.replace(c, status=SKIP, detail=f"standby gateway (no endpoints by design): {c.detail}", hint="")
        if c.check == "handshake" and c.status in (FAIL, WARN)
        else c
        for c in checks
    ]
