"""User-data mode's re-resolver (issue 24): wg-mesh-reresolve, its peers file, a oneshot service and its timer, in the
cloud-init of a site that peers with a DNS-named static site, and only there (every other site's user data keeps its
bytes). `delivery: live` needs none of it: the agent runs the same module (wg_mesh.gateway.reresolve.watch).

The script travels as plain text without docstrings and comments, wg_mesh.gateway.files' code in place of its import
(ship.standalone: lines dropped or inserted, never rewritten, so the bytes do not depend on the Python that renders
them); the AWS user data is gzip'd whole, which compresses it
better than a gzip+base64 of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from wg_mesh.config import MeshConfig
from wg_mesh.gateway import reresolve, ship
from wg_mesh.gateway.wgconf import InterfacePlan
from wg_mesh.plan.render import INTERFACE, CloudInitExtras, File

UNIT_NAME = "wg-mesh-reresolve"
SCRIPT_PATH = f"/usr/local/sbin/{UNIT_NAME}"
CONFIG_PATH = "/etc/wg-mesh/reresolve.json"
STATE_PATH = "/var/lib/wg-mesh/reresolve.json"
SERVICE_PATH = f"/etc/systemd/system/{UNIT_NAME}.service"
TIMER_PATH = f"/etc/systemd/system/{UNIT_NAME}.timer"


def peers_file(plan: InterfacePlan, cidrs: Sequence[str] = ()) -> str | None:
    """The DNS-named peers of a site's plan as the script reads them (reresolve.load_peers), and what no answer may be
    (`own`: the site's public address and `cidrs`; the other peers' endpoints the script reads from wg0); None without
    any DNS-named peer."""
    peers = [
        {"name": p.name, "public_key": p.public_key, "endpoint_name": p.endpoint_name, "reresolve_s": p.reresolve_s}
        for p in plan.peers
        if p.endpoint_name is not None
    ]
    own = reresolve.own_addresses(plan.public_ip, cidrs)
    return json.dumps({"interface": INTERFACE, "peers": peers, "own": own}, indent=1) + "\n" if peers else None


# The sandbox of wg-mesh-metrics (wg_mesh.plan.metrics) plus what a resolver needs: root with CAP_NET_ADMIN alone
# (`wg show`, `wg set`: netlink, or wireguard-go's root-only UAPI socket), IP for DNS (the host's resolver, whatever
# resolv.conf names: no address allow list), its state in /var/lib/wg-mesh and its metrics in node-exporter's
# textfile directory.
def service_unit(textfile_dir: str) -> str:
    return f"""[Unit]
Description=wg-mesh: follow DNS-named peers' addresses (wg set, no restart)
After=wg-quick@{INTERFACE}.service network-online.target

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 {SCRIPT_PATH} {CONFIG_PATH} {STATE_PATH}
StateDirectory=wg-mesh
CapabilityBoundingSet=CAP_NET_ADMIN
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={textfile_dir}
ProtectKernelTunables=yes
{ship.SANDBOX}RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
UMask=0077
"""


def script_source() -> str:
    """wg-mesh-reresolve as the user data ships it: standalone (ship.standalone: files.py's code inlined)."""
    return ship.standalone("reresolve.py")


def timer_unit(seconds: int) -> str:
    return f"""[Unit]
Description=wg-mesh: resolve DNS-named peers every {seconds} s

[Timer]
OnBootSec=5s
OnUnitActiveSec={seconds}s
AccuracySec=1s

[Install]
WantedBy=timers.target
"""


def reresolve_extras(cfg: MeshConfig, plan: InterfacePlan, textfile_dir: str) -> CloudInitExtras:
    """The script, its peers file and units, started once wg0 is up; nothing for a site without DNS-named peers."""
    peers = peers_file(plan, [str(c) for c in cfg.site(plan.site).cidrs])
    if peers is None:
        return CloudInitExtras()
    source = script_source()
    return CloudInitExtras(
        files=(
            File(SCRIPT_PATH, source, "0755"),
            File(CONFIG_PATH, peers),
            File(SERVICE_PATH, service_unit(textfile_dir)),
            File(TIMER_PATH, timer_unit(cfg.reresolve_seconds)),
        ),
        # After wg0 (its DNS-named peers have no endpoint until this runs): one run now, then the timer.
        commands=(
            ("systemctl", "daemon-reload"),
            ("systemctl", "enable", "--now", f"{UNIT_NAME}.timer"),
            ("systemctl", "start", f"{UNIT_NAME}.service"),
        ),
        units=(f"{UNIT_NAME}.timer",),
    )
