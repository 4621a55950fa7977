"""A SHA-256-verified bulk TCP transfer between two workload hosts through the mesh (check 4 and the benchmarks):
the sender's and the receiver's TCP_MAXSEG show whether the gateways clamp the MSS."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from wg_mesh.lab.fabric.netns import LabError
from wg_mesh.lab.fabric.plan import SitePlan
from wg_mesh.lab.fabric.procs import ACCEPT_ONE, stop, wait_for_line
from wg_mesh.lab.machines.build import BuiltLab

BULK_PORT = 5001

_BULK_SERVER = (
    "import hashlib, json"
    + ACCEPT_ONE
    + """conn.settimeout(30)
digest, size = hashlib.sha256(), 0
while chunk := conn.recv(1 << 16):
    digest.update(chunk)
    size += len(chunk)
mss = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
conn.sendall(json.dumps({"bytes": size, "sha256": digest.hexdigest(), "mss": mss}).encode())
conn.close()
"""
)

_BULK_CLIENT = """
import hashlib, json, os, socket, sys, time
data = os.urandom(int(sys.argv[3]))
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
conn.settimeout(30)
mss = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
start = time.monotonic()
conn.sendall(data)
conn.shutdown(socket.SHUT_WR)
reply = b""
while chunk := conn.recv(4096):
    reply += chunk
seconds = time.monotonic() - start
print(json.dumps({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "mss": mss,
                  "seconds": seconds, "server": json.loads(reply)}))
"""


def bulk_transfer(lab: BuiltLab, src: SitePlan, dst: SitePlan, size: int) -> dict[str, Any]:
    target = str(dst.host_ip.ip)
    server = lab.hosts[dst.name].popen(
        [sys.executable, "-I", "-c", _BULK_SERVER, target, str(BULK_PORT)], stdout=subprocess.PIPE
    )
    lab.state.track(server.pid, dst.host_ns, "bulk TCP server")
    try:
        if not wait_for_line(server, "listening", 10):
            raise LabError(f"bulk TCP server on {dst.name} did not start: {stop(server)}")
        argv = [sys.executable, "-I", "-c", _BULK_CLIENT, target, str(BULK_PORT), str(size)]
        result = lab.hosts[src.name].run(argv, check=False, timeout=60)
    finally:
        stop(server)
    if result.returncode != 0:
        return {"from": src.name, "to": dst.name, "ok": False, "error": (result.stderr or result.stdout)[-300:]}
    sent = json.loads(result.stdout)
    received = sent.pop("server")
    verified = received["bytes"] == sent["bytes"] and received["sha256"] == sent["sha256"]
    clamped = max(sent["mss"], received["mss"]) <= lab.plan.peer_mss(src.name, dst.name)
    return {
        "from": src.name,
        "to": dst.name,
        "ok": verified and clamped,
        "bytes": sent["bytes"],
        "verified": verified,
        "mss_sender": sent["mss"],
        "mss_receiver": received["mss"],
        "mbps": round(sent["bytes"] * 8 / sent["seconds"] / 1e6, 1),
    }
