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
`HealthServer`: `GET /healthz` on every address: `200 active` when this gateway is active and healthy (and, on GCP,
knows it holds the static address: wg_mesh.gateway.ha_gcp.Witness, so a stale ex-active never draws the load
balancer's traffic), `503 standby`, `503 unhealthy: <check>` or `503 active, not known to hold the address`
otherwise (GCP's load-balancer health check probes it; the lab and doctor read it on AWS too). On GCP every 200
answered also keeps the Witness's chain: any client the INPUT policy admits (the probers, the gateway subnet,
doctor on the gateway itself) counts as a probe. One thread for every connection, each with a deadline, a size
bound and a cap on how many are open.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

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


# /healthz is reachable by every host its INPUT policy admits, and answers from one thread: a connection is a socket
# and a bounded buffer, never a thread, so idle or slow clients cannot exhaust threads or memory.
MAX_CONNECTIONS = 64  # open at once; a new connection past this closes the oldest (the probers' stay short)
CONNECTION_TIMEOUT_S = (
    2.0  # from accept to the last byte sent, reading and writing both (GCP probes wait 1 s: wg_mesh.plan.ha)
)
MAX_REQUEST_BYTES = 2048  # request line and headers; larger: 431 and closed (a probe sends ~100 bytes)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Too Large",
           503: "Service Unavailable"}  # fmt: skip


def response(code: int, text: str, head_only: bool = False) -> bytes:
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.0 {code} {REASONS.get(code, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head if head_only else head + body


def answer(request: bytes, status: Callable[[], tuple[int, str]]) -> bytes:
    """The response to a complete request head (bytes up to the blank line): GET or HEAD /healthz -> status()."""
    line = request.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return response(400, "bad request")
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD"):
        return response(405, "method not allowed")
    code, text = status() if target.split(b"?", 1)[0] == b"/healthz" else (404, "not found")
    return response(code, text, head_only=method == b"HEAD")


class _Connection:
    __slots__ = ("deadline", "inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.inbox, self.outbox = sock, deadline, b"", b""


class HealthServer:
    """`GET /healthz` -> `status()`'s (code, text); anything else 404. One daemon thread multiplexes every connection
    (selectors): at most MAX_CONNECTIONS open, each closed CONNECTION_TIMEOUT_S after its accept whatever it did, and
    at most MAX_REQUEST_BYTES read from it. HTTP/1.0, one request per connection."""

    def __init__(
        self,
        port: int,
        status: Callable[[], tuple[int, str]],
        host: str = "0.0.0.0",
        max_connections: int = MAX_CONNECTIONS,
        timeout_s: float = CONNECTION_TIMEOUT_S,
        max_request: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.status, self.max_connections, self.timeout_s, self.max_request = (
            status,
            max_connections,
            timeout_s,
            max_request,
        )
        self.listener = socket.create_server((host, port), backlog=128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.connections: dict[socket.socket, _Connection] = {}  # insertion order: oldest first
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.serve_forever, name="wg-mesh-healthz", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.wake_w.send(b"x")
        if self.thread is not None:
            self.thread.join(timeout=5)
        for sock in list(self.connections):
            self._close(sock)
        for sock in (self.listener, self.wake_r, self.wake_w):
            sock.close()
        self.selector.close()

    def serve_forever(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic()
            soonest = min((c.deadline for c in self.connections.values()), default=now + 1.0)
            for key, events in self.selector.select(timeout=max(0.0, min(soonest - now, 1.0))):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    self._event(sock, events)
                except Exception:  # one client's trouble (or a failing status) ends its connection, not the server
                    if sock in self.connections:
                        self._close(sock)
            now = time.monotonic()
            for sock, conn in list(self.connections.items()):
                if conn.deadline <= now:
                    self._close(sock)

    def _event(self, sock: socket.socket, events: int) -> None:
        if sock is self.listener:
            self._accept()
        elif sock is self.wake_r:
            with contextlib.suppress(OSError):
                sock.recv(64)
        elif sock in self.connections:
            if events & selectors.EVENT_READ:
                self._read(sock, self.connections[sock])
            elif events & selectors.EVENT_WRITE:
                self._write(sock, self.connections[sock])

    def _accept(self) -> None:
        for _ in range(self.max_connections):  # drain the backlog, a bounded batch per wake-up
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            while len(self.connections) >= self.max_connections:
                self._close(next(iter(self.connections)))  # the oldest: idle holders cannot lock a probe out
            self.connections[sock] = _Connection(sock, time.monotonic() + self.timeout_s)
            self.selector.register(sock, selectors.EVENT_READ)

    def _read(self, sock: socket.socket, conn: _Connection) -> None:
        try:
            data = sock.recv(self.max_request + 1 - len(conn.inbox))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return
        conn.inbox += data
        end = conn.inbox.find(b"\r\n\r\n")
        end = conn.inbox.find(b"\n\n") if end < 0 else end
        if end >= 0:
            self._reply(sock, conn, answer(conn.inbox[:end], self.status))
        elif len(conn.inbox) > self.max_request:
            self._reply(sock, conn, response(431, "request too large"))

    def _reply(self, sock: socket.socket, conn: _Connection, data: bytes) -> None:
        conn.inbox, conn.outbox = b"", data
        self.selector.modify(sock, selectors.EVENT_WRITE)
        self._write(sock, conn)

    def _write(self, sock: socket.socket, conn: _Connection) -> None:
        try:
            sent = sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            sent = len(conn.outbox)
        conn.outbox = conn.outbox[sent:]
        if not conn.outbox:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self.connections.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.unregister(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
