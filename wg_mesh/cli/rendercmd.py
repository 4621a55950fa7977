"""`wg-mesh render`: what one site's gateway is given (wg0.conf, the #cloud-config), rendered offline.

The same pure functions `pulumi up` calls inside its applies (wg_mesh.component: topology.interface_plan,
render.wg_quick_conf, userdata.render_user_data / render_live_user_data), given what only a deployment knows as
stand-ins: WireGuard keys generated for this display (the real ones live in the stack's Pulumi state), and for AWS
and GCP gateways public addresses from the documentation ranges (RFC 5737) where the cloud would allocate one.
Every private key in the text is masked unless show_secrets; the stand-ins are said to be stand-ins in the output.
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from pathlib import Path

import yaml

from wg_mesh.config import ConfigError, MeshConfig, StaticSite
from wg_mesh.plan import live, render, signing, topology, userdata, wgkey
from wg_mesh.plan.render import WG_CONF_PATH
from wg_mesh.plan.topology import PeerAddress

MASK = "<secret: masked, --show-secrets to print>"
PARTS = ("wg0.conf", "user-data")
# RFC 5737's documentation ranges: never a real gateway's address, obviously a stand-in to a reader.
PLACEHOLDER_NETWORKS = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
DEFAULT_PROJECT = "wg-mesh"  # Pulumi.yaml's name in this repository; a stack file elsewhere names its own


@dataclass(frozen=True)
class DisplayKeys:
    """Keys made for one display: never a site's real key (those are in Pulumi state, and never read here)."""

    private: Mapping[str, str] = field(repr=False)
    public: Mapping[str, str]
    verify_key: str  # delivery: live: the mesh's document verify key, pinned in agent.json (public)

    @classmethod
    def generate(cls, cfg: MeshConfig) -> DisplayKeys:
        private = {site.name: wgkey.generate_private_key() for site in cfg.sites}
        public = {name: wgkey.public_key(key) for name, key in private.items()}
        return cls(private, public, signing.verify_key_b64(secrets.token_bytes(signing.SEED_BYTES)))

    def secrets(self) -> list[str]:
        return list(self.private.values())


def _placeholder_ips() -> Iterator[str]:
    for network in PLACEHOLDER_NETWORKS:
        yield from (str(host) for host in IPv4Network(network).hosts())


def display_directory(
    cfg: MeshConfig, keys: DisplayKeys, public_ips: Mapping[str, str] | None = None
) -> dict[str, PeerAddress]:
    """The mesh's directory as `pulumi up` would publish it, with stand-ins for the cloud gateways' addresses
    (`public_ips`: the real ones, where known: the tests give a run's under mocks)."""
    private = topology.private_directory(cfg)
    stand_ins = _placeholder_ips()
    given = public_ips or {}
    return {
        site.name: PeerAddress(
            public_ip=given.get(site.name) or (str(site.endpoint) if isinstance(site, StaticSite) else next(stand_ins)),
            public_key=keys.public[site.name],
            private_ip=private.get(site.name),
        )
        for site in cfg.sites
    }


def mask(text: str, hidden: list[str]) -> str:
    for secret in hidden:
        text = text.replace(secret, MASK)
    return text


def _header(cfg: MeshConfig, site_name: str, label: str, show_secrets: bool) -> str:
    site = cfg.site(site_name)
    where = getattr(site, "region", None) or getattr(site, "endpoint", "")
    lines = [
        f"wg-mesh render: site {site_name} ({site.cloud}, {where}) of {label}, delivery {cfg.delivery}",
        "Keys here are generated for this display, not the site's: its real keys live in the stack's Pulumi state",
        "(`pulumi stack output wireguard_configs --show-secrets` prints the deployed wg0.conf).",
    ]
    if any(not isinstance(s, StaticSite) for s in cfg.sites):
        lines.append(
            "AWS and GCP gateways' public addresses are stand-ins from the documentation ranges (RFC 5737: "
            "192.0.2.0/24...): pulumi up allocates the real ones."
        )
    if getattr(site, "gateways", 1) > 1:
        lines.append(
            "gateways: 2: each of the pair gets this user data with an `ha` object in agent.json naming its cloud "
            "resources (known only at deploy; left out here)."
        )
    lines.append("Private keys are shown (--show-secrets)." if show_secrets else "Private keys are masked.")
    return "".join(f"# {line}\n" for line in lines)


def render_site(
    cfg: MeshConfig,
    site_name: str,
    *,
    project: str,
    stack: str,
    label: str,
    parts: tuple[str, ...] = PARTS,
    show_secrets: bool = False,
    keys: DisplayKeys | None = None,
    public_ips: Mapping[str, str] | None = None,
) -> str:
    """The header, then each part asked for, as text. ConfigError (a usage problem) for a site the mesh has not."""
    names = [s.name for s in cfg.sites]
    if site_name not in names:
        raise ConfigError([f"--site {site_name}: no such site in {label}; its sites: {', '.join(names)}"])
    keys = keys or DisplayKeys.generate(cfg)
    directory = display_directory(cfg, keys, public_ips)
    site = cfg.site(site_name)
    wg_conf = render.wg_quick_conf(topology.interface_plan(cfg, site_name, directory), keys.private[site_name])
    out = [_header(cfg, site_name, label, show_secrets)]
    if "wg0.conf" in parts:
        if cfg.delivery == "live":
            how = "written on the gateway by wg-mesh-agent from the signed peer document and the site's key"
        else:
            how = "in the user data below, as cloud-init writes it"
        out.append(f"\n### {WG_CONF_PATH} ({how})\n{wg_conf}")
    if "user-data" in parts:
        if cfg.delivery == "live":
            source = live.agent_source(site, project, stack)
            # the floor a new stack's gateway is made with (its documents' first serial): `pulumi up` pins the
            # serial current when it makes the gateway (wg_mesh.tools.serial.floor_pin)
            trust = live.trust(cfg, site, project, stack, keys.verify_key, floor=1)
            text = userdata.render_live_user_data(cfg, site_name, source, trust=trust)
            what = "no key and no peer in it; its verify key is a stand-in too, its floor a new stack's"
        else:
            text = userdata.render_user_data(cfg, site_name, wg_conf, directory)
            what = "it holds wg0.conf, a secret output of the stack"
        packed = "; EC2 receives it gzip'd and base64'd" if site.cloud == "aws" else ""
        if isinstance(site, StaticSite):
            packed = "; the stack output static_site_cloud_init holds it"
        out.append(f"\n### user data (#cloud-config: {what}{packed})\n{text}")
    text = "".join(out)
    return text if show_secrets else mask(text, keys.secrets())


def project_name(stack_path: Path) -> str:
    """The Pulumi project of the stack file: `name` in the Pulumi.yaml beside it (live: it scopes every store)."""
    try:
        name = yaml.safe_load((stack_path.parent / "Pulumi.yaml").read_text()).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        return DEFAULT_PROJECT
    return name if isinstance(name, str) and name else DEFAULT_PROJECT


def stack_name(stack_path: Path) -> str:
    name = stack_path.name
    return name[len("Pulumi.") : -len(".yaml")] if name.startswith("Pulumi.") and name.endswith(".yaml") else name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", required=True, metavar="NAME", help="the site to render (its name in the stack)")
    parser.add_argument(
        "--part", choices=PARTS, action="append", help="print only this part (repeat for both; default both)"
    )
    parser.add_argument(
        "--show-secrets", action="store_true", help="print the (generated) private keys instead of masking them"
    )
