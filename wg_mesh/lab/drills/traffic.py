"""Traffic that runs through a whole drill, judged afterwards per time window: a ping every 10 ms and a
SHA-256-verified TCP stream between two workload hosts.

* `Pinger`: `ping -D -i 0.01` (the lab's outage measurement's command line, outage.measure_outage); every reply's
  time and icmp_seq are kept, so a window's lost pings are the sequence numbers missing between its replies and
  its longest silence the largest gap between two replies.
* `Stream`: one TCP connection, paced, for as long as it runs; the receiver notes every silence longer than
  STALL_NOTE_S (time, length) and both ends hash every byte; at the end the two SHA-256 must match.

Both are started with Node.popen and recorded in the lab's state by pid; `stop` (procs.stop) ends them.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from wg_mesh.lab.fabric.netns import LabError, LabState, Node
from wg_mesh.lab.fabric.procs import ACCEPT_ONE, stop

PING_INTERVAL_S = 0.01
STREAM_PORT = 5002
STREAM_RATE = 1 << 20  # bytes a second: steady, and light on the two CPUs wireguard-go shares with the lab
STALL_NOTE_S = 0.05
LOST_AT_MAX = 10
OTHER_LINES = 3
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .* icmp_seq=(\d+)")


@dataclass
class Pinger:
    node: Node
    state: LabState
    netns: str
    target: str
    replies: list[tuple[float, int]] = field(default_factory=list)  # (epoch, icmp_seq)
    said: list[str] = field(default_factory=list)  # ping's other lines, the last OTHER_LINES (why it stopped)
    _proc: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None

    def start(self) -> None:
        argv = ["ping", "-n", "-D", "-i", f"{PING_INTERVAL_S:g}", "-W", "1", self.target]
        self._proc = self.node.popen(argv, stdout=subprocess.PIPE)
        self.state.track(self._proc.pid, self.netns, f"ping {self.target} (drill)")

        def collect() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            for line in self._proc.stdout:
                if m := _REPLY.match(line):
                    self.replies.append((float(m.group(1)), int(m.group(2))))
                elif line.strip():
                    self.said[:] = [*self.said[-(OTHER_LINES - 1) :], line.strip()]

        self._reader = threading.Thread(target=collect, daemon=True)
        self._reader.start()

    def stop(self) -> None:
        if self._proc is not None:
            stop(self._proc)
        if self._reader is not None:
            self._reader.join(2)

    def exited(self) -> str | None:
        """None while ping runs; else its exit status and last words. iputils ping exits at once when the first
        route lookup fails (`connect: Invalid argument` on a blackhole route, `Network is unreachable`), so a
        pinger started before its host's route exists is dead, not waiting."""
        if self._proc is None or self._proc.poll() is None:
            return None
        if self._reader is not None:
            self._reader.join(2)
        return f"ping {self.target} exited ({self._proc.returncode}): {'; '.join(self.said) or 'no output'}"

    def replied_since(self, t: float) -> bool:
        return any(at > t for at, _ in self.replies[-50:])

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Lost pings and the longest silence between `start` and `end` (epoch seconds); the replies just
        before and after the window bound it, so a silence that spans an edge counts."""
        replies = sorted(self.replies)
        inside = [r for r in replies if start <= r[0] <= end]
        before = [r for r in replies if r[0] < start][-1:]
        after = [r for r in replies if r[0] > end][:1]
        bounded = before + inside + after
        if len(bounded) < 2:
            return {"replies": len(inside), "lost": None, "longest_gap_ms": None, "lost_at_s": []}
        seqs = sorted({seq for _, seq in bounded})
        lost = (seqs[-1] - seqs[0] + 1) - len(seqs)
        gap = max(later[0] - earlier[0] for earlier, later in itertools.pairwise(bounded))
        # When the lost pings were sent (seconds after `start`, interpolated between the replies around them):
        # which event of the step they line up with. The first LOST_AT_MAX only.
        lost_at = []
        for (t1, s1), (t2, s2) in itertools.pairwise(sorted(bounded, key=lambda r: r[1])):
            for k in range(1, min(s2 - s1, LOST_AT_MAX + 1)):
                lost_at.append(round(t1 + k * (t2 - t1) / (s2 - s1) - start, 2))
        lost_at = lost_at[:LOST_AT_MAX]
        return {"replies": len(inside), "lost": lost, "longest_gap_ms": round(gap * 1000, 1), "lost_at_s": lost_at}


_STREAM_SERVER = (
    "import hashlib, json, time"
    + ACCEPT_ONE
    + """conn.settimeout(120)
digest, size, stalls, last, noted = hashlib.sha256(), 0, [], time.time(), 0.0
while chunk := conn.recv(1 << 16):
    now = time.time()
    if now - last > float(sys.argv[3]):
        stalls.append([round(now, 3), round(now - last, 3)])
    if now - noted > 0.1:
        print(f"rx {now:.3f}", flush=True)
        noted = now
    last = now
    digest.update(chunk)
    size += len(chunk)
conn.sendall(json.dumps({"bytes": size, "sha256": digest.hexdigest(), "stalls": stalls}).encode())
conn.close()
"""
)

_STREAM_CLIENT = """
import hashlib, json, os, signal, socket, sys, time
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
conn.settimeout(120)
rate, chunk_size = int(sys.argv[3]), 16384
digest, size, start = hashlib.sha256(), 0, time.monotonic()
print("streaming", flush=True)
while not stopping:
    chunk = os.urandom(chunk_size)
    conn.sendall(chunk)
    digest.update(chunk)
    size += len(chunk)
    ahead = size / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
conn.shutdown(socket.SHUT_WR)
reply = b""
while part := conn.recv(4096):
    reply += part
print(json.dumps({"bytes": size, "sha256": digest.hexdigest(), "server": json.loads(reply)}), flush=True)
"""


@dataclass
class Stream:
    src: Node
    src_netns: str
    dst: Node
    dst_netns: str
    target: str
    state: LabState
    port: int = STREAM_PORT
    rate: int = STREAM_RATE  # bytes a second
    result: dict[str, Any] = field(default_factory=dict)
    last_rx: float = 0.0  # epoch of the receiver's latest progress line (every 0.1 s while bytes arrive)
    _server: subprocess.Popen[str] | None = None
    _client: subprocess.Popen[str] | None = None

    def start(self) -> None:
        server_argv = [sys.executable, "-I", "-c", _STREAM_SERVER, self.target, str(self.port), str(STALL_NOTE_S)]
        self._server = self.dst.popen(server_argv, stdout=subprocess.PIPE)
        self.state.track(self._server.pid, self.dst_netns, "stream receiver (drill)")
        listening = threading.Event()

        def collect() -> None:
            assert self._server is not None and self._server.stdout is not None
            for line in self._server.stdout:
                if line.startswith("rx "):
                    self.last_rx = float(line.split()[1])
                elif "listening" in line:
                    listening.set()

        threading.Thread(target=collect, daemon=True).start()
        if not listening.wait(10):
            raise LabError(f"stream receiver did not start: {stop(self._server)}")
        client_argv = [sys.executable, "-I", "-c", _STREAM_CLIENT, self.target, str(self.port), str(self.rate)]
        self._client = self.src.popen(client_argv, stdout=subprocess.PIPE)
        self.state.track(self._client.pid, self.src_netns, "stream sender (drill)")
        assert self._client.stdout is not None
        if self._client.stdout.readline().strip() != "streaming":
            raise LabError(f"stream sender did not connect: {stop(self._client)}")

    def stop(self) -> dict[str, Any]:
        """End the sender (SIGTERM: it finishes the stream and reads the receiver's summary), then the receiver."""
        out = stop(self._client) if self._client is not None else ""
        if self._server is not None:
            stop(self._server)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if not lines:
            self.result = {"ok": False, "error": f"no summary from the sender: {out.strip()[-300:]}"}
            return self.result
        sent = json.loads(lines[-1])
        received = sent.pop("server")
        verified = sent["bytes"] == received["bytes"] and sent["sha256"] == received["sha256"]
        self.result = {"ok": verified, "verified": verified, "bytes": sent["bytes"], "stalls": received["stalls"]}
        return self.result

    def longest_stall_ms(self, start: float, end: float) -> float:
        """The longest silence at the receiver that began in [start, end] (0: none over STALL_NOTE_S)."""
        stalls = [gap for at, gap in self.result.get("stalls", []) if start <= at - gap <= end]
        return round(max(stalls, default=0.0) * 1000, 1)


def stop_traffic(pinger: Pinger | None, stream: Stream | None) -> None:
    """A drill's teardown of its traffic, whatever happened: the pinger, and the stream unless it was already stopped
    (its result read). Both stop by pid (procs.stop)."""
    if pinger is not None:
        pinger.stop()
    if stream is not None and not stream.result:
        stream.stop()
