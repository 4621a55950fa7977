"""The mesh configuration: one pydantic model for the `wg-mesh:mesh` stack config key.

Everything a user can get wrong is caught here, before a single resource is declared.
`parse_mesh` returns a valid `MeshConfig` or raises `ConfigError` carrying *every* problem,
each prefixed with its field path (`sites[1].overlay_ip: ...`); wg_mesh.plan.validate.load_mesh adds the limits. The
sites' models are in wg_mesh.config.sites, the rules between fields and sites in wg_mesh.config.rules.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from wg_mesh.config import alerting, dnsname, quotas, reach, underlay
from wg_mesh.config import relay as relaying
from wg_mesh.config.fields import MonitoringCidr, Port, UsableCidr, parse_network
from wg_mesh.config.machines import GCP_ARM_MACHINE_SERIES
from wg_mesh.config.messages import EXPECTED, describe, quote
from wg_mesh.config.names import name_problems
from wg_mesh.config.rules import (
    SiteFacts,
    cross_site_problems,
    ha_delivery_problems,
    kms_delivery_problems,
    lenient,
    monitoring_problems,
    previous_name_problems,
    site_rule_problems,
)
from wg_mesh.config.sites import (
    INTERNET_MTU,
    MAX_INTERNET_TUNNEL_MTU,
    MIN_TUNNEL_MTU,
    WIREGUARD_IPV4_OVERHEAD,
    AwsSite,
    CloudSite,
    ConfigError,
    Deferred,
    GcpSite,
    Site,
    SiteBase,
    StaticSite,
    Strict,
)

# --- the mesh ---------------------------------------------------------------------------


MIN_ROTATION_LEAD_S, MAX_ROTATION_LEAD_S = 60, 86_400  # rotation_lead_seconds (below)


class MeshConfig(Strict):
    overlay_cidr: UsableCidr = Field(
        description="The overlay network: every site's `overlay_ip` lies in it; the same address rules as `cidrs`."
    )
    listen_port: Port = Field(default=51820, description="WireGuard's UDP port on every gateway.")
    mtu: Literal["auto"] | Annotated[int, Field(ge=MIN_TUNNEL_MTU, le=MAX_INTERNET_TUNNEL_MTU)] = Field(
        default="auto",
        description="The internet tunnel MTU. `auto`: the smallest `underlay_mtu` (counted at most 1500, the "
        "internet's) minus 60 (outer IPv4 header, UDP, WireGuard). Pairs on a private path use that path's.",
    )
    persistent_keepalive: int = Field(
        default=25,
        ge=0,
        le=65535,
        description="Seconds between keepalives: keeps NAT and conntrack state open (0: off).",
    )
    reresolve_seconds: int = Field(
        default=dnsname.DEFAULT_RERESOLVE_SECONDS,
        ge=dnsname.MIN_RERESOLVE_SECONDS,
        le=dnsname.MAX_RERESOLVE_SECONDS,
        description="How often the gateways that peer with a DNS-named static site resolve its name again, and "
        "follow it when its address changed (docs/how-to/static-sites.md).",
    )
    masquerade: bool = Field(
        default=False,
        description="SNAT the mesh's traffic to the gateway's address; off so that source addresses are preserved "
        "(the routes are wired). A site's own `masquerade` overrides it.",
    )
    sites: list[Site] = Field(min_length=2, description="The sites of the mesh, two or more (the tables below).")
    # Who may scrape the gateways' node-exporter on exporter_port (TCP), from outside the mesh or inside it (the cloud
    # firewalls and every gateway's INPUT policy, wg_mesh.plan.inputpolicy, admit these only): none by default.
    monitoring_cidrs: list[MonitoringCidr] = Field(
        default_factory=list,
        description="Networks allowed to scrape the gateways' node-exporter (TCP `exporter_port`), in the cloud "
        "firewalls and every gateway's INPUT policy; a Prometheus inside the mesh must be listed too. A change "
        "replaces the gateways.",
    )
    exporter_port: Port = Field(default=9100, description="node-exporter's TCP port on every gateway.")
    # The WgMeshDynamicSiteSilent alert's threshold (wg_mesh.config.alerting: its default, its bounds and why).
    dynamic_silence_alert_seconds: (
        Annotated[int, Field(ge=alerting.MIN_SILENCE_S, le=alerting.MAX_SILENCE_S)] | None
    ) = Field(default=None, description=alerting.SILENCE_DESCRIPTION)
    # cloud: operators reach gateways through the cloud's own access path (GCP: IAP TCP forwarding + OS Login;
    # AWS: Session Manager), never through a port open to the internet. none: no access path at all.
    operator_access: Literal["none", "cloud"] = Field(
        default="none",
        description="`cloud`: operators reach the gateways through the cloud's own access path (AWS Session Manager, "
        "GCP IAP TCP forwarding with OS Login), never an open SSH port. `none`: no access path.",
    )
    # Pulumi `protect` on what other environments remember: public addresses and keys (on in Pulumi.prod.yaml).
    protect: bool = Field(
        default=False,
        description="Pulumi `protect` on public addresses and keys: `destroy` or a removed site cannot delete them.",
    )
    # delivery: live: a rotated key (key_epoch) becomes valid this long after `pulumi up` created it, on every gateway
    # at the same moment (wg_mesh.gateway.rotation; README, "Rotating a key"). It must exceed the time `pulumi up`
    # takes from the new key to its last document, plus the agents' poll interval (10 s); a party that applies the
    # document later switches when it does (the outage of an unannounced rotation, for that party only). 60 s at
    # least: the poll and a large mesh's document writes; a day at most: a static site's operator copying its files.
    rotation_lead_seconds: int = Field(
        default=120,
        ge=MIN_ROTATION_LEAD_S,
        le=MAX_ROTATION_LEAD_S,
        description="`delivery: live`: a rotated key becomes valid this long after `pulumi up` created it, on every "
        "gateway at the same moment.",
    )
    # How a gateway gets its peers and its private key (README, "Delivery"). user-data: in the user data, read once at
    # first boot (a peer change replaces the gateway). live: the cloud's own stores, read by wg-mesh-agent on the
    # gateway and applied in place; nothing that replaces a gateway depends on the peers or on any key.
    delivery: Literal["user-data", "live"] = Field(
        default="user-data",
        description="How a gateway gets its peers and its private key. `user-data`: read once at first boot (a new "
        "site or a rotated key replaces every cloud gateway). `live`: the clouds' own stores, applied in place by "
        "wg-mesh-agent (nothing is replaced).",
    )
    # delivery: live: bump to replace the mesh's document signing key (wg_mesh.keys.SigningKey's RandomBytes keepers).
    # Every gateway pins the key in its user data, so a new one replaces every cloud gateway (README, "Delivery").
    signing_key_epoch: int = Field(
        default=0,
        ge=0,
        description="`delivery: live`: bump to replace the mesh's document signing key (every cloud gateway is "
        "replaced; static sites need their agent files again).",
    )
    # Sites that reach each other over a private path (docs/underlay.md): their private addresses, the path's MTU.
    private_paths: list[underlay.PrivatePath] = Field(
        default_factory=list,
        description="Sites that reach each other over a private path (interconnect, peering, VPN, WAN): their "
        "private addresses and the path's MTU. Needs `delivery: live`.",
    )
    relay: str | None = Field(default=None, description=relaying.RELAY_DESCRIPTION)

    @model_validator(mode="after")
    def _mesh_wide(self) -> MeshConfig:
        problems = [p for i, site in enumerate(self.sites) for p in site_rule_problems(i, site.__dict__)]
        problems += previous_name_problems([site.__dict__ for site in self.sites])
        problems += name_problems([site.__dict__ for site in self.sites])  # URNs unique (wg_mesh.config.names)
        problems += ha_delivery_problems([site.__dict__ for site in self.sites], self.delivery)
        problems += kms_delivery_problems([site.__dict__ for site in self.sites], self.delivery)
        problems += cross_site_problems(self.overlay_cidr, [SiteFacts.of(s) for s in self.sites], self.mtu)
        problems += monitoring_problems(self.monitoring_cidrs)
        problems += alerting.silence_problems(self.dynamic_silence_alert_seconds, self.persistent_keepalive)
        problems += underlay.problems(self)
        problems += reach.mesh_problems(self.sites, self.persistent_keepalive, _path_sites(self.private_paths))
        problems += relaying.problems(self.sites, self.relay)
        if problems:
            raise ConfigError(problems)
        return self

    def site(self, name: str) -> AwsSite | GcpSite | StaticSite:
        for site in self.sites:
            if site.name == name:
                return site
        raise KeyError(name)

    def dynamic_silence(self) -> int:
        """The WgMeshDynamicSiteSilent threshold: dynamic_silence_alert_seconds, else its default."""
        given = self.dynamic_silence_alert_seconds
        return alerting.default_silence(self.persistent_keepalive) if given is None else given

    def masquerades(self, site: SiteBase) -> bool:
        """Whether the site's gateway SNATs what it forwards: never for a single host (no cidrs), which forwards
        nothing (wg_mesh.plan.topology.forwards)."""
        if not site.cidrs:
            return False
        return self.masquerade if site.masquerade is None else site.masquerade


# --- loading and error reporting ---------------------------------------------------------

_SITE_FIELDS = {
    tag: set(model.model_fields) for tag, model in (("aws", AwsSite), ("gcp", GcpSite), ("static", StaticSite))
}


def _format_loc(loc: Iterable[int | str]) -> str:
    out = ""
    parts = list(loc)
    for k, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif k > 0 and isinstance(parts[k - 1], int) and part in _SITE_FIELDS and parts[0] == "sites":
            continue  # pydantic's discriminator tag: not something the user wrote
        elif part.startswith("function-") or part in ("literal['auto']", "constrained-int", "int"):
            continue  # union branch labels
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _belongs(key: str, loc: tuple[Any, ...]) -> str:
    """Where a key given at the wrong level or on the wrong kind of site belongs ("" when nowhere else either)."""
    if len(loc) == 1:
        clouds = [tag for tag, fields in _SITE_FIELDS.items() if key in fields]
        return f" ({key} is a key of a site ({', '.join(clouds)}): under one of sites)" if clouds else ""
    if loc[0] == "sites" and isinstance(loc[1], int) and (len(loc) == 3 or (len(loc) == 4 and loc[2] in _SITE_FIELDS)):
        if key in MeshConfig.model_fields:
            return f" ({key} is a mesh key: beside sites, not in a site)"
        clouds = [tag for tag, fields in _SITE_FIELDS.items() if key in fields]
        return f" (a key of {' and '.join(clouds)} sites only)" if clouds else ""
    return ""


def _format_error(err: Mapping[str, Any], site_tags: Mapping[int, str]) -> str:
    loc = tuple(err["loc"])
    path = _format_loc(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        known: Iterable[str] = MeshConfig.model_fields if len(loc) == 1 else ()
        if len(loc) >= 2 and loc[0] == "sites" and isinstance(loc[1], int) and len(loc) <= 4:
            known = _SITE_FIELDS.get(site_tags.get(loc[1], ""), set().union(*_SITE_FIELDS.values()))
        elif loc[0] == "sites" and loc[-2:-1] == ("quotas",):
            known = quotas.AwsQuotas.model_fields
        elif loc[0] == "private_paths" and len(loc) == 3:
            known = underlay.PrivatePath.model_fields
        hint = difflib.get_close_matches(key, list(known), n=1)  # a key of another level or kind of site: where
        return f"{path}: unknown key" + (_belongs(key, loc) or (f" (did you mean {hint[0]!r}?)" if hint else ""))
    if kind == "missing":
        return f"{path}: required"
    if loc[:1] == ("mtu",):
        bounds = f"{MIN_TUNNEL_MTU}..{MAX_INTERNET_TUNNEL_MTU}"
        return (
            f"mtu: {quote(err['input'])} is neither 'auto' nor an integer in {bounds} (the internet carries 1500 "
            "bytes, WireGuard takes 60; a jumbo path's MTU is private_paths[].mtu)"
        )
    if kind in EXPECTED:
        return f"{path}: expected {EXPECTED[kind]}, got {describe(err.get('input'))}"
    if kind in ("less_than_equal", "greater_than_equal") and isinstance(err.get("input"), int):
        bound = err["ctx"].get("le", err["ctx"].get("ge"))
        side = "above the maximum" if kind == "less_than_equal" else "below the minimum"
        return f"{path}: {err['input']} is {side} {bound}"
    if loc == ("sites",) and kind == "too_short":
        return f"sites: a mesh needs at least two sites, got {len(err['input'])}"
    if kind == "union_tag_invalid":
        return f"{path}.cloud: {quote(err['input'].get('cloud'))} is not one of 'aws', 'gcp', 'static'"
    if kind == "union_tag_not_found":
        return f"{path}.cloud: required (one of 'aws', 'gcp', 'static')"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return f"{path}: {msg}"


_DEFERRED_BRANCH = f"is-instance[{Deferred.__name__}]"


def _problems_from(exc: ValidationError, raw_sites: Any) -> list[str]:
    tags = {}
    if isinstance(raw_sites, list):
        tags = {i: str(s.get("cloud")) for i, s in enumerate(raw_sites) if isinstance(s, dict)}
    problems: list[str] = []
    for err in exc.errors():
        if err["loc"] and err["loc"][-1] == _DEFERRED_BRANCH:
            continue  # the other branch of `str | Deferred`: its own error says what is wrong with the plain value
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, ConfigError):
            problems.extend(ctx_error.problems)
        else:
            problem = _format_error(err, tags)
            if problem not in problems:
                problems.append(problem)
    return problems


def parse_mesh(raw: Any, *, check_limits: bool = True) -> MeshConfig:
    """The raw `wg-mesh:mesh` value as a MeshConfig whose fields and rules hold; else ConfigError listing every problem.

    A valid config's limits are its caller's to check: wg_mesh.plan.validate.load_mesh checks the quotas and the sizes
    of the gateways' user data (which needs rendering, a layer above this one). check_limits: an invalid config's
    problems include the quotas it crosses (wg_mesh.config.quotas), as far as its parsed fields tell."""
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): expected a mapping with overlay_cidr and sites, got {type(raw).__name__}"])
    try:
        return MeshConfig.model_validate(raw)
    except ValidationError as exc:
        problems = _problems_from(exc, raw.get("sites"))

    # Field errors stop pydantic before the mesh-wide checks. Run those on whatever fields did
    # parse, so that a user fixing a typo is not surprised by a second round of problems.
    overlay = lenient(parse_network, raw.get("overlay_cidr"))
    raw_sites = raw.get("sites")
    if isinstance(raw_sites, list):
        rules = [p for i, site in enumerate(raw_sites) if isinstance(site, dict) for p in site_rule_problems(i, site)]
        problems.extend(p for p in rules if p not in problems)
        renames = previous_name_problems([site if isinstance(site, dict) else {} for site in raw_sites])
        renames += name_problems([site if isinstance(site, dict) else {} for site in raw_sites])
        problems.extend(p for p in renames if p not in problems)
        sites = [site if isinstance(site, dict) else {} for site in raw_sites]
        ha = ha_delivery_problems(sites, raw.get("delivery", "user-data"))
        ha += kms_delivery_problems(sites, raw.get("delivery", "user-data"))
        problems.extend(p for p in ha if p not in problems)
    if overlay is not None and isinstance(raw_sites, list):
        mtu = raw.get("mtu", "auto")
        valid = isinstance(mtu, int) and not isinstance(mtu, bool) and MIN_TUNNEL_MTU <= mtu <= MAX_INTERNET_TUNNEL_MTU
        mtu = mtu if valid or mtu == "auto" else "invalid"  # invalid: reported above, no MTU checks
        facts = [SiteFacts.from_raw(site) for site in raw_sites]
        problems.extend(p for p in cross_site_problems(overlay, facts, mtu) if p not in problems)
    problems.extend(p for p in _parsed_rules(raw, check_limits) if p not in problems)
    raise ConfigError(problems)


_SITES, _PATHS, _MONITORING = (
    TypeAdapter(list[Site]),
    TypeAdapter(list[underlay.PrivatePath]),
    TypeAdapter(list[MonitoringCidr]),
)


def _parsed_rules(raw: dict[str, Any], check_limits: bool) -> list[str]:
    """The private-path and quota rules need parsed sites and paths: when those parse, run them although another
    field failed (a wrong `listen_port` must not hide a reserved `private_ip` until the next round)."""
    try:
        overlay, sites = parse_network(raw.get("overlay_cidr")), _SITES.validate_python(raw.get("sites"))
        paths = _PATHS.validate_python(raw.get("private_paths", []))
        monitoring = _MONITORING.validate_python(raw.get("monitoring_cidrs", []))
    except (ValidationError, ValueError):
        return []
    # absent: the default; an invalid value is reported already, so no rule about it again
    delivery: Literal["user-data", "live"] = "user-data" if raw.get("delivery", "user-data") == "user-data" else "live"
    cfg = MeshConfig.model_construct(
        overlay_cidr=overlay, sites=sites, private_paths=paths, monitoring_cidrs=monitoring, delivery=delivery
    )
    keepalive = raw.get("persistent_keepalive", 25)
    valid = isinstance(keepalive, int) and not isinstance(keepalive, bool) and 0 <= keepalive <= 65535
    dynamic = reach.mesh_problems(sites, keepalive if valid else None, _path_sites(paths))
    dynamic += relaying.problems(sites, raw.get("relay")) if isinstance(raw.get("relay"), str | None) else []
    dynamic += alerting.silence_problems(raw.get("dynamic_silence_alert_seconds"), keepalive)
    return underlay.problems(cfg) + dynamic + (quotas.problems(cfg) if check_limits else [])


def _path_sites(paths: list[underlay.PrivatePath]) -> list[str]:
    return [name for path in paths for name in path.sites]


def tunnel_mtu(cfg: MeshConfig) -> int:
    """The internet tunnel MTU (every wg0 without private paths): explicit, or the smallest underlay (at most the
    internet's 1500) minus WireGuard's overhead."""
    if cfg.mtu != "auto":
        return int(cfg.mtu)
    return min(min(site.underlay_mtu, INTERNET_MTU) for site in cfg.sites) - WIREGUARD_IPV4_OVERHEAD


def summary(cfg: MeshConfig) -> str:
    """One line describing a valid mesh, for `python -m wg_mesh validate`."""
    clouds = ", ".join(f"{s.name} ({s.cloud}{', 2 gateways' if s.gateways > 1 else ''})" for s in cfg.sites)
    paths = "".join(
        f", private path {p.name} ({', '.join(p.sites)}: tunnel MTU {p.tunnel_mtu})" for p in cfg.private_paths
    )
    return (
        f"ok: {len(cfg.sites)} sites [{clouds}], overlay {cfg.overlay_cidr}, "
        f"port {cfg.listen_port}/udp, tunnel MTU {tunnel_mtu(cfg)}{paths}{relaying.summary(cfg.sites, cfg.relay)}, "
        f"delivery {cfg.delivery}"
    )


__all__ = [
    "GCP_ARM_MACHINE_SERIES",
    "WIREGUARD_IPV4_OVERHEAD",
    "AwsSite",
    "CloudSite",
    "ConfigError",
    "Deferred",
    "GcpSite",
    "MeshConfig",
    "Site",
    "StaticSite",
    "cross_site_problems",
    "parse_mesh",
    "summary",
]
