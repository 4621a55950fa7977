"""strongSwan (IKEv2, AES-256-GCM, ESP in UDP) between the same two lab gateways that run WireGuard.

charon runs in each gateway's own network and mount namespaces (the lab's holder gives each a private /run
and /etc), configured through STRONGSWAN_CONF and swanctl files under the gateway's private /run/wg-mesh-bench.
Each gateway gets one extra address on lo (the IPsec tunnel's inner address); the tunnel's traffic selectors
are those two /32s, so IPsec and WireGuard never carry each other's traffic.

The ESP data path: the kernel's XFRM/ESP when this kernel has it (probed by installing an AES-256-GCM ESP
state in a gateway namespace), else strongSwan's userspace libipsec (kernel-libipsec plugin, a TUN device
`ipsec0`), which is stated in the results and the doc.
"""

from __future__ import annotations

import base64
import gzip
import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from bench.lab.labkit import Session
from wg_mesh.config import MeshConfig
from wg_mesh.lab.fabric.netns import LabError, Node
from wg_mesh.lab.fabric.procs import stop

CHARON = "/usr/lib/ipsec/charon"
CONF_DIR = "/run/wg-mesh-bench"
VICI_SOCKET = f"{CONF_DIR}/charon.vici"
IKE_PROPOSAL = "aes256gcm16-prfsha384-ecp384"
ESP_PROPOSAL = "aes256gcm16"
TUN_DEVICE = "ipsec0"  # kernel-libipsec's TUN device
CANDIDATE_RANGES = ("10.201.0.0/30", "172.31.254.0/30", "192.168.254.0/30")
# ESP in UDP over IPv4: IP 20 + UDP 8 + SPI/sequence 8 + GCM IV 8 + ICV 16, plus the 2-byte trailer with the
# payload padded to a multiple of 4.
ESP_UDP_FIXED_OVERHEAD = 20 + 8 + 8 + 8 + 16
ESP_TRAILER = 2
ESP_ALIGN = 4
PLUGINS_USERSPACE = (
    "random nonce openssl pem pkcs1 aes gcm sha2 hmac kdf kernel-libipsec kernel-netlink socket-default vici"
)
PLUGINS_KERNEL = "random nonce openssl pem pkcs1 aes gcm sha2 hmac kdf kernel-netlink socket-default vici"


def esp_inner_mtu(path_mtu: int) -> int:
    """The largest inner packet whose ESP-in-UDP (AES-GCM) packet fits the path, for the userspace TUN."""
    inner = path_mtu - ESP_UDP_FIXED_OVERHEAD - ESP_TRAILER
    while ESP_UDP_FIXED_OVERHEAD + -(-(inner + ESP_TRAILER) // ESP_ALIGN) * ESP_ALIGN > path_mtu:
        inner -= 1
    return inner


def tunnel_range(cfg: MeshConfig) -> IPv4Network:
    """A /30 for the IPsec inner addresses that overlaps nothing of the mesh."""
    taken = [cfg.overlay_cidr, *(cidr for site in cfg.sites for cidr in site.cidrs)]
    for candidate in map(IPv4Network, CANDIDATE_RANGES):
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise LabError("no free range for the IPsec tunnel addresses")


def strongswan_conf(userspace: bool) -> str:
    plugins = PLUGINS_USERSPACE if userspace else PLUGINS_KERNEL
    libipsec = "    kernel-libipsec { load = yes }\n" if userspace else ""
    return (
        "charon {\n"
        "  load_modular = no\n"
        f"  load = {plugins}\n"
        "  install_routes = yes\n"
        "  plugins {\n"
        f"    vici {{ socket = unix://{VICI_SOCKET} }}\n"
        f"{libipsec}"
        "  }\n"
        "  filelog {\n    stderr { default = 1 }\n  }\n"
        "}\n"
        f"swanctl {{\n  socket = unix://{VICI_SOCKET}\n  load = pem pkcs1 openssl\n}}\n"
    )


def swanctl_conf(
    *, local_id: str, remote_id: str, remote_addr: str, local_ts: str, remote_ts: str, initiate: bool, psk: bytes
) -> str:
    """IKEv2 with a pre-shared key, AES-256-GCM for IKE and ESP, ESP in UDP (NAT-T, as 1:1 NAT forces anyway)."""
    return f"""connections {{
  bench {{
    version = 2
    remote_addrs = {remote_addr}
    encap = yes
    proposals = {IKE_PROPOSAL}
    dpd_delay = 0
    local {{
      auth = psk
      id = {local_id}
    }}
    remote {{
      auth = psk
      id = {remote_id}
    }}
    children {{
      bench {{
        mode = tunnel
        local_ts = {local_ts}
        remote_ts = {remote_ts}
        esp_proposals = {ESP_PROPOSAL}
        start_action = {"start" if initiate else "none"}
      }}
    }}
  }}
}}
secrets {{
  ike-bench {{
    id-a = {local_id}
    id-b = {remote_id}
    secret = 0s{base64.b64encode(psk).decode()}
  }}
}}
"""


def probe_kernel_esp(node: Node) -> tuple[bool, str]:
    """Whether this kernel takes an AES-256-GCM ESP state (XFRM + ESP + GCM); the state is removed again."""
    key = "0x" + "00" * 36  # 32-byte AES key + 4-byte salt
    argv = ["ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "spi", "0x4242"]
    argv += ["mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128"]
    result = node.run(argv, check=False)
    if result.returncode == 0:
        node.run(["ip", "xfrm", "state", "deleteall", "src", "192.0.2.1", "dst", "192.0.2.2"], check=False)
        return True, "ip xfrm state add (ESP, rfc4106(gcm(aes))) succeeded"
    return False, (result.stderr or result.stdout).strip()


def kernel_config_flags(names: tuple[str, ...]) -> dict[str, str]:
    """Selected CONFIG_* values of the running kernel, where /proc/config.gz exists."""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        return {}
    flags = {}
    for name in names:
        value = "not set"
        for line in text.splitlines():
            if line.startswith(f"{name}="):
                value = line.split("=", 1)[1]
        flags[name] = value
    return flags


@dataclass
class Gateway:
    node: Node
    netns: str
    inner: str  # the tunnel's inner address on this gateway
    conf_dir: Path  # the gateway's private CONF_DIR, seen from the host
    proc: subprocess.Popen[str] | None = None


class IpsecTunnel:
    """Two charon daemons (one per gateway) and the tunnel between them; `b` initiates."""

    def __init__(self, session: Session) -> None:
        self.session = session
        a, b = session.pair()
        self.sites = (a, b)
        net = tunnel_range(session.cfg)
        hosts = list(net.hosts())
        self.a = Gateway(session.gateway(a), a.gateway_ns, str(hosts[0]), session.gateway(a).path(CONF_DIR))
        self.b = Gateway(session.gateway(b), b.gateway_ns, str(hosts[1]), session.gateway(b).path(CONF_DIR))
        self.userspace, self.probe = True, ""
        kernel, self.probe = probe_kernel_esp(self.a.node)
        self.userspace = not kernel
        underlay = min(s.uplink_mtu for s in self.sites)
        self.inner_mtu = esp_inner_mtu(underlay) if self.userspace else None
        self.psk = secrets.token_bytes(32)

    @property
    def mode(self) -> str:
        return "strongSwan libipsec in userspace (TUN device)" if self.userspace else "kernel XFRM/ESP"

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "kernel_esp_probe": self.probe,
            "ike": IKE_PROPOSAL,
            "esp": ESP_PROPOSAL,
            "encapsulation": "ESP in UDP 4500 (NAT-T)",
            "inner_mtu": self.inner_mtu,
            "inner_addresses": [self.a.inner, self.b.inner],
        }

    def _write(
        self, gw: Gateway, peer: Gateway, peer_site_public: IPv4Address, ids: tuple[str, str], initiate: bool
    ) -> None:
        gw.conf_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        files = {
            "strongswan.conf": strongswan_conf(self.userspace),
            "swanctl.conf": swanctl_conf(
                local_id=ids[0],
                remote_id=ids[1],
                remote_addr=str(peer_site_public),
                local_ts=f"{gw.inner}/32",
                remote_ts=f"{peer.inner}/32",
                initiate=initiate,
                psk=self.psk,
            ),
        }
        for name, text in files.items():
            fd = os.open(gw.conf_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)

    def setup(self) -> float:
        """Addresses, configs and both daemons; returns seconds from starting the daemons to traffic flowing."""
        a, b = self.sites
        for gw in (self.a, self.b):
            gw.node.run(["ip", "address", "add", f"{gw.inner}/32", "dev", "lo"])
        self._write(self.a, self.b, b.public_ip, (a.name, b.name), initiate=False)
        self._write(self.b, self.a, a.public_ip, (b.name, a.name), initiate=True)
        started = time.monotonic()
        self.start(self.a)
        self.start(self.b)
        self.wait_up()
        return time.monotonic() - started

    def env(self) -> dict[str, str]:
        return {"STRONGSWAN_CONF": f"{CONF_DIR}/strongswan.conf"}

    def start(self, gw: Gateway) -> None:
        socket = gw.conf_dir / "charon.vici"
        socket.unlink(missing_ok=True)
        log = (self.session.state.log_dir / f"charon-{gw.netns}.log").open("a")
        gw.proc = gw.node.popen([CHARON], stdout=log, env=self.env())
        log.close()
        self.session.state.track(gw.proc.pid, gw.netns, "charon (bench)")
        deadline = time.monotonic() + 10
        while not socket.exists():
            if gw.proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"charon in {gw.netns} did not start (log: {self.session.state.log_dir})")
            time.sleep(0.005)
        if self.inner_mtu is not None:  # the userspace TUN is created by charon at start: fit it to the underlay
            gw.node.run(["ip", "link", "set", TUN_DEVICE, "mtu", str(self.inner_mtu)])
        result = gw.node.run(
            ["swanctl", "--load-all", "--file", f"{CONF_DIR}/swanctl.conf"], env=self.env(), check=False, timeout=15
        )
        if result.returncode != 0:
            raise LabError(f"swanctl --load-all in {gw.netns}: {(result.stderr or result.stdout).strip()[-300:]}")

    def stop(self, gw: Gateway) -> None:
        if gw.proc is not None:
            stop(gw.proc)
            gw.proc = None

    def restart(self, gw: Gateway) -> None:
        self.stop(gw)
        self.start(gw)

    def wait_up(self, timeout: float = 15.0) -> None:
        """Until a ping crosses the tunnel."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.a.node.run(
                ["ping", "-n", "-c", "1", "-W", "0.2", "-I", self.a.inner, self.b.inner], check=False, timeout=5
            )
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise LabError(f"the IPsec tunnel did not come up within {timeout:.0f} s")
            time.sleep(0.01)

    def teardown(self) -> None:
        for gw in (self.a, self.b):
            self.stop(gw)
