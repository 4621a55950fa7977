"""What the user data installs for wg-mesh-agent (delivery: live): the package's files, the unit, the config, the
first-boot command. Pure: the program renders these into cloud-init; nothing here runs on a gateway.

STAND-IN from the program helper's branch (wt-program), kept minimal: the agent helper's ship.py (branch wt-agent)
replaces it on merge, with this API: LIB_DIR, PACKAGE, CONFIG_PATH, UNIT_NAME, UNIT_PATH, files(), unit(),
agent_config(site, source), once_command().
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources

LIB_DIR = "/usr/local/lib/wg-mesh"
PACKAGE = "wgmesh_gateway"  # mesh.gateway, renamed on the gateway (its modules import each other relatively)
CONFIG_PATH = "/etc/wg-mesh/agent.json"
UNIT_NAME = "wg-mesh-agent"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}.service"
ENVIRONMENT_PATH = f"/etc/default/{UNIT_NAME}"
POLL_SECONDS = 10
ONCE_TIMEOUT_S = 300
_NOT_SHIPPED = frozenset({"ship.py"})  # pure program-side helpers


def files() -> list[tuple[str, str]]:
    """(path on the gateway, text) of every module of the package, plain text (the AWS user data is gzip'd whole)."""
    package = resources.files(__package__ or "mesh.gateway")
    names = sorted(f.name for f in package.iterdir() if f.name.endswith(".py") and f.name not in _NOT_SHIPPED)
    return [(f"{LIB_DIR}/{PACKAGE}/{name}", package.joinpath(name).read_text()) for name in names]


def _command() -> str:
    return f"/usr/bin/python3 -m {PACKAGE}.agent --config {CONFIG_PATH}"


def unit() -> str:
    return f"""[Unit]
Description=wg-mesh: apply the peer document to wg0 in place
After=wg-quick@wg0.service network-online.target
Wants=network-online.target

[Service]
Environment=PYTHONPATH={LIB_DIR}
EnvironmentFile=-{ENVIRONMENT_PATH}
ExecStart={_command()}
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


def agent_config(site: str, source: Mapping[str, str], poll_seconds: int = POLL_SECONDS) -> str:
    """/etc/wg-mesh/agent.json: where the site's document and key are; no secret, no peer."""
    doc = {"site": site, "interface": "wg0", "poll_seconds": poll_seconds, "source": dict(source)}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def once_command(timeout_s: int = ONCE_TIMEOUT_S) -> tuple[str, ...]:
    """First boot, before wg-quick@wg0: fetch and apply one document (writes wg0.conf and the metrics mapping)."""
    return ("env", f"PYTHONPATH={LIB_DIR}", *_command().split(), "--once", "--timeout", str(timeout_s))
