"""Alert thresholds in the mesh config: how long a dynamic-address site (issue 24, `endpoint: dynamic`) may be silent
before `WgMeshDynamicSiteSilent` fires (wg_mesh.tools.monitoring renders the rule; doctor on a gateway applies the same
default).

WireGuard renews a live session every 2 minutes (REKEY_AFTER_TIME, 120 s) and drops one older than 180 s
(REJECT_AFTER_TIME), so a dynamic site that is up has a handshake under 180 s old: its keepalives keep the session
live. After a gateway restart the site dials again once its old session has expired: within 180 s plus one keepalive.
The default gives it that, and four keepalives more (a NAT rebinding, a line resync): 2 x 180 s + 4 x
persistent_keepalive (460 s at the default keepalive of 25 s). Part of the config model: pure, imports nothing of ours.
"""

from __future__ import annotations

from typing import Any

# = wg_mesh.gateway.wgmetrics.HANDSHAKE_STALE_SECONDS (a test checks it): WireGuard's REJECT_AFTER_TIME
SESSION_SECONDS = 180
MIN_SILENCE_S = 240  # the stale handshake (180 s) and a minute: shorter would page for a healthy site's rekey
MAX_SILENCE_S = 7 * 86_400
SILENCE_DESCRIPTION = (
    "How long a dynamic site (`endpoint: dynamic`) may go without a handshake with a gateway before the "
    "WgMeshDynamicSiteSilent alert fires (a site not heard since that gateway's WireGuard started: this long minus "
    "180 s after the start). Unset: 2 x 180 s + 4 x `persistent_keepalive` (460 s at 25 s): a live session is "
    "renewed every 2 minutes, a restarted gateway is dialled again within 180 s and a keepalive. At least 180 s + "
    "`persistent_keepalive`. Monitoring only: nothing on the gateways changes."
)


def default_silence(persistent_keepalive: int) -> int:
    """The silence after which a dynamic site is alerted on, when the config does not say."""
    return 2 * SESSION_SECONDS + 4 * persistent_keepalive


def silence_problems(silence: Any, persistent_keepalive: Any) -> list[str]:
    """The threshold against the keepalive (both as given; values of the wrong type are field validation's)."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (silence, persistent_keepalive))
    if not ints or not MIN_SILENCE_S <= silence <= MAX_SILENCE_S or silence >= SESSION_SECONDS + persistent_keepalive:
        return []  # out of its bounds: the field's own message says so
    return [
        f"dynamic_silence_alert_seconds: {silence} is below 180 + persistent_keepalive ({persistent_keepalive}) = "
        f"{SESSION_SECONDS + persistent_keepalive}: a dynamic site that is up would be alerted on between its "
        "keepalives"
    ]
