"""docs/benchmarks.md's "HA gateways" section, from docs/bench/hafailover.json and hafailover-gcp.json: the JSON
reports of `python -m wg_mesh lab --drill ha --stack ha --json docs/bench/hafailover.json` (the AWS pair) and
`... --ha-site gcp-euw3 --json docs/bench/hafailover-gcp.json` (the GCP pair) (wg_mesh/lab/drills/hadrill.py, issue
11)."""

from __future__ import annotations

from typing import Any


def _v(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def section(data: dict[str, Any], gcp: dict[str, Any] | None = None) -> str:
    """The AWS pair's table (`data`), then the GCP pair's (`gcp`) when there is one."""
    out = ["## 10. HA gateways: failover (`gateways: 2`)\n", "### 10.1 AWS model\n", aws_intro(data)]
    out += table(data, "EIP")
    out.append(
        "\nWhat the real cloud adds (docs/ha.md section 8): AWS documents no latency for AssociateAddress or "
        "ReplaceRoute, nor how soon the data plane follows; the lab applies moto's state within 50 ms of the call. "
        "Its figures are the agents' detection and claim plus WireGuard's handshake.\n"
    )
    if gcp is not None:
        out += ["### 10.2 GCP model\n", gcp_intro(gcp)]
        out += table(gcp, "address")
        follow = [st["routes_moved_s"] - st["eip_moved_s"] for st in gcp["steps"]
                  if st.get("routes_moved_s") is not None and st.get("eip_moved_s") is not None]  # fmt: skip
        if follow:
            out.append(
                f"\nThe routes followed the address {min(follow):.1f} to {max(follow):.1f} s later: the ILB's next hop "
                "changes when the new holder passes a probe (its /healthz answers 200 once it holds the address; "
                "healthy_threshold 1) and, on a failure, the old one has failed two (unhealthy_threshold 2); in "
                "between neither is healthy and the load balancer drops the traffic (drop_traffic_if_unhealthy).\n"
            )
        out.append(GCP_ADDS)
    return "\n".join(out)


GCP_ADDS = (
    "\nWhat the real cloud adds (docs/ha.md 6.3): the lab's probers use the program's health check (interval 1 s, "
    'timeout 1 s, unhealthy after 2, healthy after 1: Google\'s "Health checks overview", '
    "https://cloud.google.com/load-balancing/docs/health-check-concepts), so detection by Google (2 failed probes, "
    "1 to 2 s after /healthz turns 503) is in the figures; how "
    "soon the ILB's data plane follows a verdict is not documented. The access-config operations "
    "(deleteAccessConfig, addAccessConfig: zonal operations) take one poll (0.2 s) each in the lab; Google "
    "documents no duration for them (https://cloud.google.com/compute/docs/reference/rest/v1/instances/"
    "addAccessConfig), and the readiness gate prints the measured gap on a real VM (`static address moved (N.N s)`). "
    "The standby's agent reads getHealth every 0.5 s and judges a holder only after `settle_s` (3 s).\n"
)


def gcp_intro(data: dict[str, Any]) -> str:
    s, p = data["sites"]["S"], data["sites"]["P"]
    return (
        f"`python -m wg_mesh lab --drill ha --stack {data['stack']} --ha-site {s['name']}`: {s['name']}'s two gateways "
        "run their agents as shipped (`gateways: 2` on GCP: Google's health check and the internal passthrough load "
        "balancer's failover policy choose the routes' next hop, the standby's agent moves the static address when "
        "Google reports the active UNHEALTHY) against the lab's GCP model (no Compute Engine emulator exists): the "
        "Compute REST subset the agents call (instances, access configs with zonal operations, addresses with "
        "`users`, getHealth), a prober per gateway that GETs its /healthz every 1 s with a 1 s timeout from the VPC "
        "(unhealthy after 2 failed probes, healthy after 1: the program's values), the ILB's next hop by the "
        "failover policy (a primary, b failover, ratio 0, drop when neither is healthy), applied every 50 ms as the "
        "VPC's routes, and the 1:1 NAT of the static address to the VM whose access config holds it; a GCE "
        f"metadata server in each gateway. Traffic, steps, replacement and sampler as for AWS, from {p['name']}'s "
        f"host to {s['name']}'s host; the sampler also counts the VMs holding the address (never more than one).\n"
    )


def aws_intro(data: dict[str, Any]) -> str:
    s, p = data["sites"]["S"], data["sites"]["P"]
    return (
        f"`python -m wg_mesh lab --drill ha --stack {data['stack']}`: {s['name']}'s two gateways run their agents as "
        "shipped (`gateways: 2`, lease in DynamoDB, Elastic IP and routes moved by the active) against the lab's AWS "
        "model: moto in server mode, whose EIP holder (DescribeAddresses) and route targets (DescribeRouteTables) the "
        "lab applies every 50 ms as the internet router's 1:1 NAT and the VPC's routes; IMDSv2 in each gateway. A "
        f"ping every 10 ms and a SHA-256-verified TCP stream run from {p['name']}'s host through {p['name']}'s gateway "
        f"and {s['name']}'s active gateway to {s['name']}'s host for the whole drill. Each step starts from a steady "
        "pair (one active holding the EIP and every route, one healthy standby); after it, the failed gateway is "
        "replaced by a new instance (all its processes killed by pid, its user data carried out again) and the pair "
        "is steady again before the next step. Outage: the longest silence between ping replies in the step; EIP / "
        "routes moved: seconds after the fault until the cloud model applied the new holder / route target; peer's "
        f"handshake: seconds after the fault of {p['name']}'s first handshake with the site after the EIP moved "
        "(`wg show latest-handshakes`, 1 s resolution). A "
        "sampler read both agents' `wgmesh_ha_role` (wg_mesh_ha.prom) and the EIP's holder every 100 ms.\n"
    )


def table(data: dict[str, Any], address: str) -> list[str]:
    """The steps' table and the summary lines of one drill report; `address`: what the cloud calls the site's
    public address (EIP, address)."""
    p = data["sites"]["P"]
    summary = data.get("summary", {})
    out = [
        f"| step | fault on | active before → after | {address} / routes moved | peer's handshake | outage "
        "| pings lost | longest stream stall | samples with two actives | |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step in data["steps"]:
        verdict = "ok" if step.get("ok") else "**FAIL**"
        out.append(
            f"| {step['step']} | {step['fault_on']} | {step['active_before']} → {_v(step['active_after'])} "
            f"| {_v(step['eip_moved_s'], ' s')} / {_v(step.get('routes_moved_s'), ' s')} "
            f"| {_v(step.get('peer_handshake_s'), ' s')} "
            f"| {_v(step.get('outage_ms'), ' ms')} | {_v(step.get('pings_lost'))} "
            f"| {_v(step.get('longest_stall_ms'), ' ms')} | {_v(step.get('two_active_samples'))} | {verdict} |"
        )
    stream = data.get("stream", {})
    verified = "match" if stream.get("verified") else "MISMATCH"
    median = summary.get("outage_median_ms")
    met = "met" if summary.get("outage_target_met") else "**not met**"
    out.append(
        f"\nOutage median over the failover steps: {_v(median, ' ms')} (target ≤ 5000 ms: {met}). Samples with two "
        f"gateways reporting the active role: {_v(summary.get('two_active_samples'))} of "
        f"{_v(summary.get('samples'))}; the {address} never had two holders. "
        f"Stream: {stream.get('bytes', 0) / 2**20:.0f} MiB, SHA-256 {verified} (0 bytes lost after TCP's recovery). "
        f"Drill: {data['duration_s']:.0f} s, {'passed' if data['ok'] else 'FAILED'}"
        + (f" ({data['error']})" if data.get("error") else "")
        + ".\n"
    )
    lags = [max(0.0, st["peer_handshake_s"] - st["eip_moved_s"]) for st in data["steps"]
            if st.get("peer_handshake_s") is not None and st.get("eip_moved_s") is not None]  # fmt: skip
    if lags:
        out.append(
            f"From the {address}'s move to {p['name']}'s handshake with the new active: "
            f"{min(lags):.1f} to {max(lags):.1f} s "
            "(1 s resolution; the promotion's one ping per peer starts the handshake; a peer still without a "
            "handshake is re-armed and pinged every second after it, instead of waiting for wireguard-go's retry "
            "after REKEY_TIMEOUT, 5 s: wg_mesh/gateway/ha_kick.py). The outage is the detection, the claim, then that "
            "handshake.\n"
        )
    for note in summary.get("notes", []):
        out.append(f"* {note}")
    return out
