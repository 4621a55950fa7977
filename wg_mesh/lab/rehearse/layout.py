"""One lab for two configs: the fabric a change runs on, pure (configs in, plans out).

A change is rehearsed on one lab (wg_mesh.lab.rehearse.world), built once: what the change does to the clouds
happens in it step by step, and the fabric (VPCs, uplinks, the internet) must hold both states. So:

* the fabric's sites are BEFORE's, in BEFORE's order, then the sites only AFTER has: a site keeps its index (its lab
  public address, its transit range) across the change;
* a renamed site (AFTER lists BEFORE's name in `previous_names`, as Pulumi's aliases carry it) is one site: its fabric
  is named after BEFORE's name, AFTER's plan calls it by its new name (same namespaces);
* every cloud site is laid out with places for several gateway machines (the HA layout, haplan.py: a, b and the
  spare c), whatever its `gateways`: a replacement starts beside the old machine, as `pulumi up` creates it, and
  its public address and routes are the lab cloud's state (haapply.Applier) that the steps move;
* each site's workload host may be sent any remote range either config has (its routes are the VPC route table's
  state, blackholed where no route exists);
* a state's own plan (`state_plan`) keeps only its sites, its MTUs and its names, so that its artifacts render as
  `pulumi up` renders them for that config.

* every private path of either config is a link from the start (the peering or interconnect exists before a config
  uses it; a member's gateway sits at its fixed private address in place a);

What the fabric cannot hold is refused before anything is built (`LayoutError`): a site that changes cloud, CIDRs
or from a LAN to a single host, a private path both configs have that changes. A change of the tunnel MTU is each
state's (its wg0 and routes), not the fabric's: the uplinks keep each site's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from ipaddress import IPv4Network

from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.lab.fabric.plan import LabPlan, LabPlanError, plan_lab
from wg_mesh.plan import topology


class LayoutError(LabPlanError):
    """The two configs cannot share one lab fabric (module docstring)."""


@dataclass(frozen=True)
class Layout:
    before: MeshConfig
    after: MeshConfig
    fabric: LabPlan  # every site of either config, under its fabric name (BEFORE's for a renamed site)
    renamed: dict[str, str]  # AFTER name -> BEFORE name, for sites renamed with previous_names

    def fabric_name(self, name: str) -> str:
        """The fabric's name of a site of either config (a renamed site's AFTER name -> its BEFORE name)."""
        return self.renamed.get(name, name)

    def after_name(self, fabric_name: str) -> str | None:
        """The name AFTER gives a fabric site (None: AFTER does not have it)."""
        return _after_name(self.after, self.renamed, fabric_name)

    def state_plan(self, which: str) -> LabPlan:
        """The fabric as the plan of one state ("before" or "after"): its sites only, under its names, its MTUs."""
        cfg = self.before if which == "before" else self.after
        names = {s.name for s in cfg.sites}
        sites = []
        for site in self.fabric.sites:
            name = site.name if which == "before" else (self.after_name(site.name) or "")
            if name in names:
                sites.append(replace(site, name=name))
        order = {s.name: i for i, s in enumerate(cfg.sites)}
        sites.sort(key=lambda s: order[s.name])
        mtu = topology.tunnel_mtu(cfg)
        return replace(
            self.fabric,
            sites=tuple(sites),
            tunnel_mtu=mtu,
            mss=topology.clamped_mss(mtu),
            listen_port=cfg.listen_port,
        )

    @property
    def kept(self) -> list[str]:
        """Fabric names of the sites both configs have (the rehearsal's traffic runs between them)."""
        return [s.name for s in self.fabric.sites if s.name in {x.name for x in self.before.sites}
                and self.after_name(s.name) is not None]  # fmt: skip


def renames(before: MeshConfig, after: MeshConfig) -> dict[str, str]:
    """AFTER name -> BEFORE name, for every AFTER site whose previous_names holds a BEFORE site's name."""
    old = {s.name for s in before.sites}
    found = {}
    for site in after.sites:
        if site.name in old:
            continue
        hits = [p for p in site.previous_names if p in old]
        if hits:
            found[site.name] = hits[0]
    return found


def _fabric_config(before: MeshConfig, after: MeshConfig, renamed: dict[str, str]) -> MeshConfig:
    """BEFORE's sites, then AFTER's new ones; every private path of either (its link is there all along: the
    peering or interconnect exists before a config uses it), its members under their fabric names."""
    carried = set(renamed)
    added = [s for s in after.sites if s.name not in {x.name for x in before.sites} and s.name not in carried]
    paths = list(before.private_paths)
    for path in after.private_paths:
        if path.name not in {p.name for p in paths}:
            paths.append(path.model_copy(update={"sites": [renamed.get(n, n) for n in path.sites]}))
    return before.model_copy(update={"sites": [*before.sites, *added], "private_paths": paths})


def _refusals(before: MeshConfig, after: MeshConfig, renamed: dict[str, str]) -> list[str]:
    problems = []
    old = {s.name: s for s in before.sites}
    for site in after.sites:
        was = old.get(renamed.get(site.name, site.name))
        if was is None:
            continue
        if was.cloud != site.cloud:
            problems.append(f"{site.name}: its cloud changes ({was.cloud} -> {site.cloud}): a new site, not a change")
        if list(was.cidrs) != list(site.cidrs):
            problems.append(f"{site.name}: its cidrs change: the lab lays a site's networks out once")
        if isinstance(was, StaticSite) and isinstance(site, StaticSite) and bool(was.cidrs) != bool(site.cidrs):
            problems.append(f"{site.name}: a LAN site becomes a single host, or the reverse")
    for old_path in before.private_paths:
        new_path = next((p for p in after.private_paths if p.name == old_path.name), None)
        if new_path is not None:  # its members under their BEFORE names (a renamed member is the same site)
            new_path = new_path.model_copy(update={"sites": [renamed.get(n, n) for n in new_path.sites]})
        if new_path is not None and new_path != old_path:
            problems.append(f"private_paths: {old_path.name} changes (its sites or MTU): its link is laid out once")
    return problems


def layout(before: MeshConfig, after: MeshConfig, prefix: str) -> Layout:
    """The lab for a change from `before` to `after`; LayoutError (every problem) when one fabric cannot hold both."""
    renamed = renames(before, after)
    problems = _refusals(before, after, renamed)
    if problems:
        raise LayoutError("; ".join(problems))
    fabric_cfg = _fabric_config(before, after, renamed)
    cloud = [s.name for s in fabric_cfg.sites if not isinstance(s, StaticSite)]
    plan = plan_lab(fabric_cfg, prefix, ha_sites=cloud)
    sites = []
    for site in plan.sites:
        ranges: list[IPv4Network] = []
        for cfg, name in ((before, site.name), (after, _after_name(after, renamed, site.name))):
            if name is not None and name in {s.name for s in cfg.sites} and site.host_routes:
                ranges += [r for r in topology.remote_ranges(cfg, name) if r not in ranges]
        sites.append(replace(site, host_routes=tuple(ranges)) if site.host_routes else site)
    return Layout(before, after, replace(plan, sites=tuple(sites)), renamed)


def _after_name(after: MeshConfig, renamed: dict[str, str], fabric_name: str) -> str | None:
    for new, old in renamed.items():
        if old == fabric_name:
            return new
    return fabric_name if fabric_name in {s.name for s in after.sites} else None
