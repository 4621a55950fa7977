"""Doctor's checks of the gateway agent (`delivery: live`): is it running, and does it apply what is published?

Read from what the agent itself exports (its node-exporter textfile, wg_mesh.gateway.agent), so doctor and the
alerts (WgMeshAgent*) judge by the same numbers. A gateway without /etc/wg-mesh/agent.json has no agent
(`delivery: user-data`): no checks at all. Standard library only.
"""

from __future__ import annotations

import re

from wg_mesh.gateway.doctor.base import FAIL, OK, Check, Host, ago, error_line

AGENT_CONFIG = "/etc/wg-mesh/agent.json"
AGENT_METRICS = "/var/lib/prometheus/node-exporter/wg_mesh_agent.prom"
AGENT_UNIT = "wg-mesh-agent"
FETCH_STALE_SECONDS = 180  # as the WgMeshAgentFetchStale alert (wg_mesh.tools.alerttable.AGENT_FETCH_STALE_SECONDS)
JOURNAL = f"`journalctl -u {AGENT_UNIT} -n 50`"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:\\.|[^"\\])*)"')


def parse_textfile(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name from Prometheus text format (comments skipped, unparsable lines ignored)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


def _value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    found = samples.get(name)
    return found[0][1] if found else None


def agent_checks(host: Host) -> list[Check]:
    try:
        host.read(AGENT_CONFIG)
    except OSError:
        return []
    checks = [_service(host)]
    try:
        samples = parse_textfile(host.read(AGENT_METRICS))
    except OSError as exc:
        return [
            *checks,
            Check(
                "agent-apply",
                FAIL,
                f"the agent has written no metrics ({AGENT_METRICS}: {exc.strerror or exc})",
                f"It has not completed a cycle since it started: {JOURNAL}.",
            ),
        ]
    return [*checks, _applied(samples), _fetched(host, samples)]


def _service(host: Host) -> Check:
    result = host.run(["systemctl", "is-active", AGENT_UNIT])
    state = result.stdout.strip() or error_line(result)
    if result.returncode == 0:
        return Check("agent", OK, f"{AGENT_UNIT} is active")
    return Check(
        "agent",
        FAIL,
        f"{AGENT_UNIT} is {state}: mesh changes (new sites, rotated keys) do not reach this gateway",
        f"`sudo systemctl restart {AGENT_UNIT}`; {JOURNAL} says why it stopped.",
    )


def _applied(samples: dict[str, list[tuple[dict[str, str], float]]]) -> Check:
    success = _value(samples, "wgmesh_agent_last_apply_success")
    applied = _value(samples, "wgmesh_agent_applied_generation")
    desired = _value(samples, "wgmesh_agent_desired_generation")
    if success == 0:
        reasons = sorted(
            (labels.get("reason", "?"), int(count))
            for labels, count in samples.get("wgmesh_agent_apply_failures_total", [])
            if count > 0
        )
        why = ", ".join(f"{reason} ({count}x)" for reason, count in reasons) or "no reason recorded"
        return Check(
            "agent-apply",
            FAIL,
            f"the latest document was not applied (failures so far: {why}); the running config is the previous one",
            "parse/generation: the document was damaged; site/scope: it belongs to another gateway or stack; "
            "signature: not signed by this mesh's key (agent.json trust.signing_key); replay: older than the running "
            "one; unsafe: it breaks an invariant no signature overrides (README, security); no_peers: it would "
            "cut this site off; key: the private key in the store does not match the document's public key "
            f"(run `pulumi up` again to republish both). {JOURNAL}.",
        )
    if applied is None or desired is None:
        return Check("agent-apply", FAIL, "the agent's metrics have no generations", JOURNAL)
    if applied != desired:
        return Check(
            "agent-apply",
            FAIL,
            f"applied generation {applied:.0f}, published {desired:.0f}: this gateway runs an older mesh",
            JOURNAL,
        )
    peers = _value(samples, "wgmesh_agent_peers")
    count = f", {peers:.0f} peers" if peers is not None else ""
    return Check("agent-apply", OK, f"the published document is applied (generation {applied:.0f}{count})")


def _fetched(host: Host, samples: dict[str, list[tuple[dict[str, str], float]]]) -> Check:
    last = _value(samples, "wgmesh_agent_last_fetch_timestamp_seconds")
    if last is None or last <= 0:
        return Check("agent-fetch", FAIL, "the agent has never read its store", _STORE_HINT)
    age = host.now() - last
    if age > FETCH_STALE_SECONDS:
        return Check("agent-fetch", FAIL, f"the agent last read its store {ago(age)} ago", _STORE_HINT)
    return Check("agent-fetch", OK, f"the agent read its store {ago(age)} ago")


_STORE_HINT = (
    "AWS: the instance role must read its Secrets Manager secret and SSM parameter (`aws sts get-caller-identity` "
    "on the gateway); GCP: the VM's service account must be a secretAccessor of the site's `-peers` and `-key` "
    "secrets (`gcloud secrets get-iam-policy`); static: /etc/wg-mesh/document.json. "
    f"{JOURNAL}."
)
