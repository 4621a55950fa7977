"""Gateway metrics as cloud-init additions: node-exporter, the wg-mesh-metrics script, its mapping and timer.

Pure: (mesh config, site name, directory of public keys) in, `render.CloudInitExtras` out. The Pulumi
components pass the result to `render.cloud_config`; the lab writes the same files into its gateways.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping
from importlib import resources

from wg_mesh import wgmetrics
from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.gateway import mapping, ship
from wg_mesh.render import INTERFACE, CloudInitExtras, File
from wg_mesh.topology import PeerAddress, interface_plan

SCRIPT_PATH = "/usr/local/sbin/wg-mesh-metrics"
# The script travels gzip+base64 in the user data (AWS takes at most 16 KB of it). The packed text is committed
# (wg_mesh/wgmetrics.py.gz.b64, checked against the source by the tests) rather than compressed at render time:
# another zlib (zlib-ng on some distributions) would give other bytes, and changed user data replaces a gateway.
PACKED_SCRIPT = "wgmetrics.py.gz.b64"
SCRIPT_ENCODING = "gz+b64"
MAPPING_PATH = wgmetrics.MAPPING_PATH
TEXTFILE_PATH = wgmetrics.TEXTFILE_PATH
# Debian/Ubuntu's prometheus-node-exporter: its unit reads ARGS from here; its textfile directory is the
# parent of TEXTFILE_PATH. cloud-init installs packages with --force-confold, so this file, written before
# the package is installed, is kept.
NODE_EXPORTER_DEFAULTS_PATH = "/etc/default/prometheus-node-exporter"
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_SERVICE = "prometheus-node-exporter.service"
# Static sites bind node-exporter to the overlay address, which exists only once wg0 is up: order it after wg0 and
# keep retrying (RestartSec 5 s stays under systemd's default start limit of 5 starts in 10 s).
NODE_EXPORTER_DROP_IN_PATH = f"/etc/systemd/system/{NODE_EXPORTER_SERVICE}.d/wg-mesh.conf"
UNIT_NAME = "wg-mesh-metrics"
SERVICE_PATH = f"/etc/systemd/system/{UNIT_NAME}.service"
TIMER_PATH = f"/etc/systemd/system/{UNIT_NAME}.timer"
INTERVAL_SECONDS = 15


def script_source() -> str:
    """The metrics script exactly as it is in the repo (stdlib only, runs as `python3 SCRIPT_PATH`)."""
    return resources.files("wg_mesh").joinpath("wgmetrics.py").read_text()


def pack(source: str) -> str:
    """gzip+base64 in 76-character lines (cloud-init's `gz+b64` ignores the newlines)."""
    data = base64.b64encode(gzip.compress(source.encode(), compresslevel=9, mtime=0)).decode()
    return "".join(data[i : i + 76] + "\n" for i in range(0, len(data), 76))


def packed_script() -> str:
    """The committed packed script; `unpack(packed_script()) == script_source()` is a test."""
    return resources.files("wg_mesh").joinpath(PACKED_SCRIPT).read_text()


def unpack(packed: str) -> str:
    return gzip.decompress(base64.b64decode(packed)).decode()


def peer_mapping(cfg: MeshConfig, name: str, directory: Mapping[str, PeerAddress]) -> str:
    """The site's name, interface and peers by public key: how the script labels peers with site names.

    Built by wg_mesh.gateway.mapping, the function the gateway agent uses in `delivery: live`.
    """
    return mapping.peer_mapping(interface_plan(cfg, name, directory))


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


def node_exporter_drop_in() -> str:
    return f"""[Unit]
After=wg-quick@{INTERFACE}.service

[Service]
Restart=on-failure
RestartSec=5
"""


def service_unit() -> str:
    textfile_dir = TEXTFILE_PATH.rsplit("/", 1)[0]
    return f"""[Unit]
Description=wg-mesh: WireGuard and forwarding metrics for node-exporter's textfile collector
After=wg-quick@{INTERFACE}.service

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 {SCRIPT_PATH} --mapping {MAPPING_PATH} --out {TEXTFILE_PATH}
Nice=10
ProtectSystem=strict
ReadWritePaths={textfile_dir}
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes
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
        else File(SCRIPT_PATH, ship.compact(script_source()), permissions="0755")
    )
    site = cfg.site(name)
    static = isinstance(site, StaticSite)
    overlay_only = (File(NODE_EXPORTER_DROP_IN_PATH, node_exporter_drop_in()),) if static else ()
    return CloudInitExtras(
        packages=(NODE_EXPORTER_PACKAGE,),
        files=(
            File(
                NODE_EXPORTER_DEFAULTS_PATH,
                node_exporter_defaults(cfg.exporter_port, str(site.overlay_ip) if static else ""),
            ),
            *overlay_only,
            script,
            *((File(MAPPING_PATH, peer_mapping(cfg, name, directory)),) if directory is not None else ()),
            File(SERVICE_PATH, service_unit()),
            File(TIMER_PATH, timer_unit()),
        ),
        commands=(
            ("systemctl", "daemon-reload"),
            ("systemctl", "enable", "--now", f"{UNIT_NAME}.timer"),
            ("systemctl", "start", f"{UNIT_NAME}.service"),
            ("systemctl", "restart", NODE_EXPORTER_SERVICE),
        ),
        units=(f"{UNIT_NAME}.timer", NODE_EXPORTER_SERVICE),
    )
