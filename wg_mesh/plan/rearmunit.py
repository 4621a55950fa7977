"""A dynamic-address site's re-arm watchdog as cloud-init additions (wg_mesh.gateway.rearm): the script, packed as
the metrics script is (committed gz+b64, wg_mesh/gateway/rearm.py.gz.b64, checked against its source by the tests),
and a service that runs it after wg0 is up.

Only a static site with `endpoint: dynamic` gets it, in both delivery modes (its cloud-init is the same file either
way; with `delivery: live` the agent's level-triggered apply puts back the very peer the script re-adds, so the two
never disagree): every other site's user data is unchanged. Pure.
"""

from __future__ import annotations

from importlib import resources

from wg_mesh.config import MeshConfig
from wg_mesh.config.reach import is_dynamic
from wg_mesh.gateway import ship
from wg_mesh.plan.metrics import SCRIPT_ENCODING
from wg_mesh.plan.render import INTERFACE, CloudInitExtras, File

SCRIPT_PATH = "/usr/local/sbin/wg-mesh-rearm"
PACKED_SCRIPT = "rearm.py.gz.b64"
SOURCE = "rearm.py"
UNIT_NAME = "wg-mesh-rearm.service"
SERVICE_PATH = f"/etc/systemd/system/{UNIT_NAME}"


def script_source() -> str:
    return resources.files("wg_mesh.gateway").joinpath(SOURCE).read_text()


def packed_script() -> str:
    return resources.files("wg_mesh.gateway").joinpath(PACKED_SCRIPT).read_text()


# The sandbox of the metrics script's unit (wg_mesh.plan.metrics.service_unit), for a long-running loop: root with
# CAP_NET_ADMIN alone (`wg show` and `wg set`: a netlink call to the kernel's WireGuard, or wireguard-go's root-only
# UAPI socket under /run/wireguard), nothing written; IP only to the overlay (its probes go to the peers' overlay
# addresses, through wg0). Restart=always: a failed `wg` call never ends it, but a crash must not either.
def service_unit(overlay_cidr: str) -> str:
    return f"""[Unit]
Description=wg-mesh: re-arm a peer that lost its session with this dynamic-address site
After=wg-quick@{INTERFACE}.service

[Service]
Type=simple
ExecStart=/usr/bin/python3 {SCRIPT_PATH} --interface {INTERFACE} --overlay {overlay_cidr}
Restart=always
RestartSec=5
Nice=5
CapabilityBoundingSet=CAP_NET_ADMIN
NoNewPrivileges=yes
ProtectSystem=strict
ProtectKernelTunables=yes
{ship.SANDBOX}RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET
IPAddressDeny=any
IPAddressAllow={overlay_cidr}
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
UMask=0077

[Install]
WantedBy=multi-user.target
"""


def rearm_extras(cfg: MeshConfig, site_name: str) -> CloudInitExtras:
    """The script and its service for a dynamic site, started right after wg0; nothing for any other site."""
    if not is_dynamic(cfg.site(site_name)):
        return CloudInitExtras()
    return CloudInitExtras(
        files=(
            File(SCRIPT_PATH, packed_script(), permissions="0755", encoding=SCRIPT_ENCODING),
            File(SERVICE_PATH, service_unit(str(cfg.overlay_cidr))),
        ),
        start=(UNIT_NAME,),
        units=(UNIT_NAME,),
    )
