"""What wg-mesh-agent exports (wg_mesh.gateway.agent): its metrics, their values, and why it refuses a document.

Standard library only (it ships with the agent). `metrics_text` renders node-exporter's textfile format.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .apply import APPLY_REASON, KEY_REASON
from .document import REASONS

STATE_REASON = "state"  # the replay floor is unknown (wg_mesh.gateway.floor): every document is refused
FAILURE_REASONS = (*REASONS, STATE_REASON, KEY_REASON, APPLY_REASON)

METRICS: dict[str, tuple[str, str]] = {  # name -> (type, help), in output order
    "wgmesh_agent_applied_generation": ("gauge", "Running peer document (0: none)."),
    "wgmesh_agent_desired_generation": ("gauge", "Last fetched peer document (0: none)."),
    "wgmesh_agent_last_apply_success": ("gauge", "1 if the last fetched document runs."),
    "wgmesh_agent_apply_failures_total": ("counter", "Documents refused or not applied, by reason."),
    "wgmesh_agent_fetch_failures_total": ("counter", "Failed fetches of the document or key."),
    "wgmesh_agent_last_fetch_timestamp_seconds": ("gauge", "Last fetch of the document."),
    "wgmesh_agent_last_apply_timestamp_seconds": ("gauge", "Last time wg0 matched the document."),
    "wgmesh_agent_peers": ("gauge", "Peers in the running document."),
    "wgmesh_agent_replay_floor": ("gauge", "No document with a lower serial is applied (0: unknown)."),
    "wgmesh_agent_state_lost": ("gauge", "1 when the floor's state is lost: every document is refused."),
    "wgmesh_agent_document_expiry_timestamp_seconds": ("gauge", "When the running document expires (0: never)."),
}


@dataclass
class Status:
    applied_generation: int = 0
    desired_generation: int = 0
    last_success: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    fetch_failures: int = 0
    last_fetch: float = 0.0
    last_apply: float = 0.0
    peers: int = 0
    floor: int = 0
    state_lost: int = 0
    expiry: int = 0


def metrics_text(site: str, status: Status) -> str:
    label = f'site="{site}"'
    values: dict[str, list[tuple[str, float]]] = {
        "wgmesh_agent_applied_generation": [(label, status.applied_generation)],
        "wgmesh_agent_desired_generation": [(label, status.desired_generation)],
        "wgmesh_agent_last_apply_success": [(label, status.last_success)],
        "wgmesh_agent_apply_failures_total": [(f'{label},reason="{r}"', n) for r, n in status.failures.items()],
        "wgmesh_agent_fetch_failures_total": [(label, status.fetch_failures)],
        "wgmesh_agent_last_fetch_timestamp_seconds": [(label, status.last_fetch)],
        "wgmesh_agent_last_apply_timestamp_seconds": [(label, status.last_apply)],
        "wgmesh_agent_peers": [(label, status.peers)],
        "wgmesh_agent_replay_floor": [(label, status.floor)],
        "wgmesh_agent_state_lost": [(label, status.state_lost)],
        "wgmesh_agent_document_expiry_timestamp_seconds": [(label, status.expiry)],
    }
    lines = []
    for name, (kind, help_text) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{labels}}} {value:.15g}" for labels, value in values[name]]
    return "\n".join(lines) + "\n"
