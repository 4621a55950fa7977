"""Health of an HA gateway (docs/ha.md section 4) and its `/healthz` endpoint. Standard library only.

`LocalChecks.sample()` runs every 0.5 s and returns the first failing check ("" when all pass):
- `wg0 down`: `ip -j link show dev wg0` fails or lacks the UP flag (`wg-quick down`, a deleted interface);
- `wg hung`: `wg show wg0 dump` did not answer within 1 s (a SIGSTOPped wireguard-go stops answering its UAPI
  socket) or failed;
- `forwarding off`: /proc/sys/net/ipv4/ip_forward is not 1;
- `document not applied`: the agent's last fetched document does not run (refused, or none yet).
`TunnelProbe` (the active's tunnel check, its own thread): one ping a second to the next peer's overlay address,
round robin; the tunnel is fine while some peer answered within `window_s` (10 s) and some peer's latest handshake
(from the dump the local checks read anyway) is at most 180 s old (REJECT_AFTER_TIME, the WgMeshHandshakeStale
threshold).
`HealthServer`: `GET /healthz` on every address: `200 active` when this gateway is active and healthy, `503
standby` or `503 unhealthy: <check>` otherwise (GCP's load-balancer health check probes it; the lab and doctor read
it on AWS too).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .pmtu_heal import overlay_address
from .wgconf import INTERFACE, InterfacePlan

WG_TIMEOUT_S = 1.0
HANDSHAKE_MAX_S = 180  # REJECT_AFTER_TIME
FORWARD_PATH = "/proc/sys/net/ipv4/ip_forward"

# argv, timeout -> (exit status, stdout); 124 for a timeout, 127 for a missing tool
Run = Callable[[Sequence[str], float], tuple[int, str]]


def run_command(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              env={"PATH": "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})  # fmt: skip
    except OSError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return done.returncode, done.stdout


def latest_handshakes(dump: str) -> list[int]:
    """The peers' latest-handshake times (unix seconds, 0 = never) from `wg show IFACE dump`."""
    return [int(f[4]) for f in (line.split("\t") for line in dump.splitlines()[1:]) if len(f) == 8 and f[4].isdigit()]


class LocalChecks:
    def __init__(
        self,
        applied: Callable[[], bool],
        interface: str = INTERFACE,
        run: Run = run_command,
        forward_path: str = FORWARD_PATH,
    ) -> None:
        self.applied, self.interface, self.run, self.forward_path = applied, interface, run, forward_path
        self.dump = ""  # the last answered dump (the tunnel check reads its handshakes)

    def sample(self) -> str:
        code, out = self.run(["ip", "-j", "link", "show", "dev", self.interface], WG_TIMEOUT_S)
        try:
            flags = json.loads(out)[0].get("flags", []) if code == 0 else []
        except (ValueError, IndexError, AttributeError):
            flags = []
        if "UP" not in flags:
            return f"{self.interface} down"
        code, out = self.run(["wg", "show", self.interface, "dump"], WG_TIMEOUT_S)
        if code != 0:
            return f"wg hung ({'no answer in 1 s' if code == 124 else f'exit {code}'})"
        self.dump = out
        try:
            with open(self.forward_path) as f:
                forwarding = f.read().strip()
        except OSError:
            forwarding = "?"
        if forwarding != "1":
            return "forwarding off"
        if not self.applied():
            return "document not applied"
        return ""


class TunnelProbe:
    """The active's tunnel check: a ping a second, round robin over the peers' overlay addresses."""

    def __init__(
        self,
        plan: Callable[[], InterfacePlan | None],
        dump: Callable[[], str],
        run: Run = run_command,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.plan, self.dump, self.run, self.window_s, self.clock, self.wall = plan, dump, run, window_s, clock, wall
        self.last_ok: float | None = None
        self.next = 0

    def probe_once(self) -> None:
        plan = self.plan()
        if plan is None or not plan.peers:
            return
        peer = plan.peers[self.next % len(plan.peers)]
        self.next += 1
        address = overlay_address(plan, peer.name)
        if self.run(["ping", "-n", "-q", "-c", "1", "-W", "1", address], 2.0)[0] == 0:
            self.last_ok = self.clock()

    def ok(self) -> bool:
        if self.last_ok is None or self.clock() - self.last_ok > self.window_s:
            return False
        now = self.wall()
        return any(t and now - t <= HANDSHAKE_MAX_S for t in latest_handshakes(self.dump()))

    def reset(self) -> None:
        """After a promotion: the window starts now (the handshakes are being made)."""
        self.last_ok = self.clock()

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            with contextlib.suppress(Exception):  # a failed probe is a failed probe; the thread must live on
                self.probe_once()
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))


class HealthServer:
    """`GET /healthz` -> `status()`'s (code, text); anything else 404. A daemon thread."""

    def __init__(self, port: int, status: Callable[[], tuple[int, str]], host: str = "0.0.0.0") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, text = status() if self.path.split("?")[0] == "/healthz" else (404, "not found")
                body = (text + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every second: not for the journal

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="wg-mesh-healthz", daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
