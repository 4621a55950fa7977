"""Gateway metrics as cloud-init additions: node-exporter, the wg-mesh-metrics script, its mapping and timer.

Pure: (mesh config, site name, directory of public keys) in, `render.CloudInitExtras` out. The Pulumi
components pass the result to `render.cloud_config`; the lab writes the same files into its gateways.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping
from importlib import resources

from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.gateway import mapping, relaytrust, ship, wgmetrics
from wg_mesh.plan import relay
from wg_mesh.plan.render import INTERFACE, CloudInitExtras, File
from wg_mesh.plan.topology import PeerAddress, interface_plan

SCRIPT_PATH = "/usr/local/sbin/wg-mesh-metrics"
# The script travels gzip+base64 in the user data (AWS takes at most 16 KB of it), without its docstrings and comments
# (shipped_source). The packed text is committed (wg_mesh/gateway/wgmetrics.py.gz.b64, checked against the source by
# the tests) rather than compressed at render time: another zlib (zlib-ng on some distributions) would give other
# bytes, and changed user data replaces a gateway.
PACKED_SCRIPT = "wgmetrics.py.gz.b64"
SCRIPT_ENCODING = "gz+b64"
MAPPING_PATH = wgmetrics.MAPPING_PATH
TEXTFILE_PATH = wgmetrics.TEXTFILE_PATH
STATE_PATH = wgmetrics.STATE_PATH  # the last known endpoints (roams), in the unit's StateDirectory
# Debian/Ubuntu's prometheus-node-exporter: its unit reads ARGS from here; its textfile directory is the
# parent of TEXTFILE_PATH. cloud-init installs packages with --force-confold, so this file, written before
# the package is installed, is kept.
NODE_EXPORTER_DEFAULTS_PATH = "/etc/default/prometheus-node-exporter"
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_SERVICE = "prometheus-node-exporter.service"
# node-exporter's drop-in: its sandbox, and on static sites its ordering after wg0 (node_exporter_drop_in).
NODE_EXPORTER_DROP_IN_PATH = f"/etc/systemd/system/{NODE_EXPORTER_SERVICE}.d/wg-mesh.conf"
UNIT_NAME = "wg-mesh-metrics"
SERVICE_PATH = f"/etc/systemd/system/{UNIT_NAME}.service"
TIMER_PATH = f"/etc/systemd/system/{UNIT_NAME}.timer"
INTERVAL_SECONDS = 15


def script_source() -> str:
    """The metrics script exactly as it is in the repo (stdlib only, runs as `python3 SCRIPT_PATH`)."""
    return resources.files("wg_mesh.gateway").joinpath("wgmetrics.py").read_text()


def shipped_source() -> str:
    """What a gateway runs, in both delivery modes: the script without docstrings, comments and blank lines, with
    wg_mesh.gateway.files' code in place of its import (ship.standalone: lines dropped or inserted, never rewritten)."""
    return ship.standalone("wgmetrics.py")


def pack(source: str) -> str:
    """gzip+base64 in 76-character lines (cloud-init's `gz+b64` ignores the newlines)."""
    data = base64.b64encode(gzip.compress(source.encode(), compresslevel=9, mtime=0)).decode()
    return "".join(data[i : i + 76] + "\n" for i in range(0, len(data), 76))


def packed_script() -> str:
    """The committed packed script; `unpack(packed_script()) == shipped_source()` is a test."""
    return resources.files("wg_mesh.gateway").joinpath(PACKED_SCRIPT).read_text()


def unpack(packed: str) -> str:
    return gzip.decompress(base64.b64decode(packed)).decode()


def peer_mapping(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> str:
    """The site's name, interface and peers by public key: how the script labels peers with site names.

    Built by wg_mesh.gateway.mapping, the function the gateway agent uses in `delivery: live`; a relayed site's
    relayed partners from the relay its agent.json pins (the same config facts: wg_mesh.plan.relay.trust_relay).
    """
    pinned = relay.trust_relay(cfg, name)
    return mapping.peer_mapping(interface_plan(cfg, name, directory), relay=relaytrust.parse_relay(pinned, name))


def node_exporter_defaults(port: int, address: str = "") -> str:
    """node-exporter's ARGS: on every interface of a cloud gateway (its cloud firewall and INPUT policy admit only
    monitoring_cidrs), on `address` only where nothing stands in front of the host (static sites: the overlay)."""
    textfile_dir = TEXTFILE_PATH.rsplit("/", 1)[0]
    if address:
        where = (
            f"# wg-mesh: node-exporter on {address}:{port} only, the overlay address: nothing stands in front of this\n"
            "# host, so it must not answer on its public address (host details, peer keys, every internal prefix).\n"
        )
    else:
        where = (
            "# wg-mesh: node-exporter on the mesh's exporter_port (the cloud firewall and the INPUT policy admit only\n"
            "# monitoring_cidrs), with the textfile collector that reads wg-mesh-metrics' output.\n"
        )
    return where + f'ARGS="--web.listen-address={address}:{port} --collector.textfile.directory={textfile_dir}"\n'


# node-exporter's own unit (Debian/Ubuntu: User=prometheus, nothing else) gets the shared sandbox from a drop-in
# (`systemd-analyze security --offline=yes`: 1.5, was 9.2): no capability at all, a read-only file system (it writes
# nothing; the textfile directory is read), /proc/sys read-only. What remains: the host's network (it serves the
# scrape: AF_INET/AF_INET6, no IP allow list, which is the cloud firewall's and the INPUT policy's to keep),
# AF_NETLINK (the netdev and netclass collectors), AF_UNIX (the journal), the host's /proc (most collectors read
# it: no ProcSubset=pid), and the whole @system-service call set (Go's runtime calls setrlimit and sched_* at start).
# Static sites bind node-exporter to the overlay address, which exists only once wg0 is up: order it after wg0 and
# keep retrying (RestartSec 5 s stays under systemd's default start limit of 5 starts in 10 s).
def node_exporter_drop_in(static: bool = False) -> str:
    after = f"[Unit]\nAfter=wg-quick@{INTERFACE}.service\n\n" if static else ""
    retry = "Restart=on-failure\nRestartSec=5\n" if static else ""
    return f"""{after}[Service]
{retry}CapabilityBoundingSet=
NoNewPrivileges=yes
ProtectSystem=strict
ProtectKernelTunables=yes
{ship.SANDBOX}RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallFilter=@system-service
RemoveIPC=yes
UMask=0077
"""


# The metrics script's sandbox (`systemd-analyze security --offline=yes`: 1.4, was 8.9; tests/test_units_sandbox.py
# holds it at <= 4.0). It stays root with CAP_NET_ADMIN alone: `wg show all dump` asks the kernel's WireGuard
# (a CAP_NET_ADMIN netlink call) or wireguard-go's root-only UAPI socket under /run/wireguard; it writes one file
# in node-exporter's textfile directory (root's: no CAP_DAC_OVERRIDE; its mode set by chmod, so UMask 0077 is
# safe) and its own state (the peers' last known endpoints, to see roams) in its StateDirectory. It reads the host's
# routes and links (netlink: AF_NETLINK, and AF_UNIX for the journal, no IP at all) and
# /proc/sys/net/ipv4/ip_forward (so the host's /proc, read-only).
def service_unit() -> str:
    textfile_dir = TEXTFILE_PATH.rsplit("/", 1)[0]
    return f"""[Unit]
Description=wg-mesh: WireGuard and forwarding metrics for node-exporter's textfile collector
After=wg-quick@{INTERFACE}.service

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 {SCRIPT_PATH} --mapping {MAPPING_PATH} --out {TEXTFILE_PATH} --state {STATE_PATH}
StateDirectory={STATE_PATH.split("/")[-2]}
Nice=10
CapabilityBoundingSet=CAP_NET_ADMIN
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={textfile_dir}
ProtectKernelTunables=yes
{ship.SANDBOX}RestrictAddressFamilies=AF_UNIX AF_NETLINK
IPAddressDeny=any
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
UMask=0077
"""


def timer_unit() -> str:
    return f"""[Unit]
Description=wg-mesh: refresh WireGuard metrics every {INTERVAL_SECONDS} s

[Timer]
OnBootSec={INTERVAL_SECONDS}s
OnUnitActiveSec={INTERVAL_SECONDS}s
AccuracySec=1s

[Install]
WantedBy=timers.target
"""


def metrics_extras(
    cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress] | None, packed: bool = True
) -> CloudInitExtras:
    """What a gateway's cloud-init adds for metrics: node-exporter, our script, its mapping and timer.

    directory None (delivery: live): no mapping; the agent writes it with every document it applies. packed False
    (live): the script as plain text without its comments and docstrings (ship.compact; the whole AWS user data is
    gzip'd, and text compresses better than base64)."""
    script = (
        File(SCRIPT_PATH, packed_script(), permissions="0755", encoding=SCRIPT_ENCODING)
        if packed
        else File(SCRIPT_PATH, shipped_source(), permissions="0755")
    )
    site = cfg.site(name)
    static = isinstance(site, StaticSite)
    return CloudInitExtras(
        packages=(NODE_EXPORTER_PACKAGE,),
        files=(
            File(
                NODE_EXPORTER_DEFAULTS_PATH,
                node_exporter_defaults(cfg.exporter_port, str(site.overlay_ip) if static else ""),
            ),
            File(NODE_EXPORTER_DROP_IN_PATH, node_exporter_drop_in(static)),
            script,
            *((File(MAPPING_PATH, peer_mapping(cfg, name, directory)),) if directory is not None else ()),
            File(SERVICE_PATH, service_unit()),
            File(TIMER_PATH, timer_unit()),
        ),
        # Before wg-quick@wg0 starts (and after the live agent's first fetch, which writes the mapping): runcmd stops
        # at its first failure (render.cloud_config), and a gateway whose tunnel does not come up must still export
        # wgmesh_interface_up 0 (WgMeshInterfaceDown) through the node-exporter its package started.
        setup=(
            ("systemctl", "daemon-reload"),
            ("systemctl", "enable", "--now", f"{UNIT_NAME}.timer"),
            ("systemctl", "start", f"{UNIT_NAME}.service"),
        ),
        # After wg0: a static site's node-exporter binds the overlay address.
        commands=(("systemctl", "restart", NODE_EXPORTER_SERVICE),),
        units=(f"{UNIT_NAME}.timer", NODE_EXPORTER_SERVICE),
    )
