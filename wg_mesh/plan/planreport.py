"""`wg-mesh plan`'s report, as data (the `--json` form) and as text: per site what `pulumi up` creates and what
replaces it, and with `--before` what a config change creates, deletes, replaces or updates and what traffic sees.

Pure: given the resources of runs under mocks (wg_mesh.plan.preview.Resource) and the configs. Values are never
printed, only input names; a secret input is named as secret."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.plan.preview import GATEWAY_TYPES, Change, Diff, Resource, replaces, short_type, site_of

MESH_WIDE = "(mesh-wide)"
REPLACEMENTS = "docs/concepts/replacements.md"
LIVE_STORES = (
    "aws:secretsmanager/secretVersion:SecretVersion",
    "aws:ssm/parameter:Parameter",
    "gcp:secretmanager/secretVersion:SecretVersion",
)
ROUTES = ("aws:ec2/route:Route", "gcp:compute/route:Route")
ADDRESSES = ("aws:ec2/eip:Eip", "gcp:compute/address:Address")
KEYS = ("random:index/randomBytes:RandomBytes",)
# Inputs that are a resource's name in its cloud: a replacement they force is a new name (the site's, after a rename)
CLOUD_NAMES = frozenset({"name", "secretId", "accountId", "roleId"})
RENAME = "docs/how-to/rename.md"
DOWN = "deleted before its replacement: the site is down meanwhile"
GAP = "deleted before its replacement: traffic through it stops meanwhile"


def _site(resource: Resource, names: Sequence[str]) -> str:
    return site_of(resource.name, names) or MESH_WIDE


def _entry(resource: Resource, names: Sequence[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": resource.type,
        "short_type": short_type(resource.type),
        "name": resource.name,
        "site": site_of(resource.name, names),
        "replaced_by": [{"input": k, "by": who} for k, who in replaces(resource)],
        "delete_before_replace": resource.delete_before_replace,
        "protect": resource.protect,
        "secret_inputs": sorted(resource.secret),
    }
    return entry


def _groups(cfg: MeshConfig, site: str | None) -> list[str]:
    names = [s.name for s in cfg.sites]
    return [site] if site is not None else [*names, MESH_WIDE]


def listing(cfg: MeshConfig, resources: Sequence[Resource], site: str | None = None) -> dict[str, Any]:
    """Per site (and mesh-wide), every resource `pulumi up` creates and what replaces it."""
    names = [s.name for s in cfg.sites]
    listed = [r for r in resources if r.listed]
    groups: list[dict[str, Any]] = []
    for group in _groups(cfg, site):
        members = sorted(
            (_entry(r, names) for r in listed if _site(r, names) == group), key=lambda e: (e["short_type"], e["name"])
        )
        cloud = cfg.site(group).cloud if group in names else None
        groups.append({"site": None if group == MESH_WIDE else group, "cloud": cloud, "resources": members})
    return {"delivery": cfg.delivery, "count": sum(len(g["resources"]) for g in groups), "sites": groups}


def _flags(entry: Mapping[str, Any]) -> list[str]:
    flags = []
    if entry["replaced_by"]:
        by = ", ".join(r["input"] + ("" if r["by"] == "provider" else f" ({r['by']})") for r in entry["replaced_by"])
        flags.append(f"replaced on a change of: {by}")
    if entry["delete_before_replace"]:
        flags.append(DOWN if entry["type"] in GATEWAY_TYPES else GAP)
    if entry["protect"]:
        flags.append("protected (pulumi up refuses to delete it)")
    if entry["secret_inputs"]:
        flags.append(f"secret: {', '.join(entry['secret_inputs'])} (never printed)")
    return flags


def listing_text(data: Mapping[str, Any], label: str) -> str:
    lines = [f"wg-mesh plan: {label}, delivery {data['delivery']}: {data['count']} resources pulumi up creates",
             "(the program run under mocks: no cloud, no Pulumi CLI; replacement inputs: the program's "
             "replace_on_changes, user_data_replace_on_change, the provider's force-new inputs)"]  # fmt: skip
    for group in data["sites"]:
        title = f"site {group['site']} ({group['cloud']})" if group["site"] else "mesh-wide"
        lines += ["", f"{title}: {len(group['resources'])} resources"]
        if not group["resources"] and group["site"]:
            lines.append("  nothing in any cloud (its config is in the stack outputs)")
        for entry in group["resources"]:
            lines.append(f"  {entry['short_type']:<28} {entry['name']}")
            lines += [f"      {flag}" for flag in _flags(entry)]
    return "\n".join(lines) + "\n"


# --- a change -----------------------------------------------------------------------------


def _change(change: Change, names: Sequence[str]) -> dict[str, Any]:
    r = change.resource
    return {
        "type": r.type,
        "short_type": short_type(r.type),
        "name": r.name,
        "site": site_of(r.name, names),
        "inputs": list(change.inputs),
        "unknown": dict(change.unknown),
        "forced_by": dict(change.forced_by),
        "order": change.order,
        "secret_inputs": sorted(set(change.inputs) & r.secret),
        "was": r.was_name,  # the name it had (an alias: a renamed site), else None
    }


def _plain(r: Resource, names: Sequence[str]) -> dict[str, Any]:
    return {"type": r.type, "short_type": short_type(r.type), "name": r.name, "site": site_of(r.name, names)}


def renames(before: MeshConfig, after: MeshConfig) -> dict[str, str]:
    """A site of `after` that is a site of `before` under a previous name: new name -> old name."""
    olds = {s.name for s in before.sites}
    return {s.name: old for s in after.sites if s.name not in olds for old in s.previous_names if old in olds}


def _renamed(
    name: str, old: str, mine: Mapping[str, list[dict[str, Any]]], carried: int, after: MeshConfig
) -> list[str]:
    """What a rename does to the site (wg_mesh.plan.preview follows the aliases): kept, replaced, and for an HA pair
    what the replaced shared resources mean for its traffic (docs/how-to/rename.md)."""
    replaced = mine["replaced"]
    lost = [e["name"] for e in replaced if e["type"] in ADDRESSES + KEYS]
    said = [f"renamed from {old} (previous_names): {carried} of its resources are the old ones (aliases); "
            + ("its public address and key are kept" if not lost else f"REPLACED: {', '.join(lost)}")]  # fmt: skip
    named = [e["name"] for e in replaced if (CLOUD_NAMES & set(e["forced_by"])) - set(e["unknown"])]
    if named:
        said.append(f"named after the site in its cloud, so replaced under the new name: {', '.join(named)}")
    site = after.site(name)
    if isinstance(site, AwsSite | GcpSite) and site.gateways > 1:
        said.append(RENAMED_PAIR[site.cloud] + f" ({RENAME})")
    return said


RENAMED_PAIR = {
    "aws": "gateways: 2: from the start of up the old pair cannot move the address or the routes (the agents' rights "
    "and lease table follow the new name), so it neither fails over nor hands over; the new gateway a claims them "
    "once it is ready: one handover",
    "gcp": "gateways: 2: the load balancer is replaced; the routes move to the new one once both new gateways are "
    "ready, but the new pair may take the static address only from a VM of the new name: the site's traffic to the "
    "mesh stops from the routes' re-creation until Pulumi deletes the old VMs at the end of up (minutes)",
}


def _traffic(
    name: str, entries: Mapping[str, list[dict[str, Any]]], before: MeshConfig, after: MeshConfig,
    outputs: tuple[Mapping[str, Mapping[str, str]], Mapping[str, Mapping[str, str]]], carried: Mapping[str, int],
) -> list[str]:  # fmt: skip
    """What traffic of one site sees, in words."""
    olds, news = {s.name for s in before.sites}, {s.name for s in after.sites}
    renamed = renames(before, after)
    if name in renamed.values():
        new_name = next(new for new, old in renamed.items() if old == name)
        return [f"renamed to {new_name}: see {new_name}"]
    if name not in olds and name not in renamed:
        return ["a new site: everything is created; the other sites learn it as a peer (below for each)"]
    if name not in news:
        return ["removed: its resources are deleted; the other sites drop it as a peer"]
    mine = {kind: [e for e in entries[kind] if e["site"] == name] for kind in entries}
    said = _renamed(name, renamed[name], mine, carried.get(name, 0), after) if name in renamed else []
    for e in mine["replaced"]:
        if e["type"] in GATEWAY_TYPES:
            if e["order"] == "delete-before-create":
                said.append(f"gateway {e['name']} replaced, delete-before-create: the site is down while the new "
                            f"one boots ({REPLACEMENTS})")  # fmt: skip
            else:
                said.append(f"gateway {e['name']} replaced, create-before-delete through the readiness gate: the "
                            "replacement gap while the address and routes move, peers re-handshake "
                            f"({REPLACEMENTS})")  # fmt: skip
    routes = [e for e in mine["replaced"] if e["type"] in ROUTES]
    if routes:
        said.append(f"{len(routes)} route(s) re-created ({routes[0]['order']})")
    moved = [e for e in mine["updated"] if e["type"] in ROUTES]
    if moved:
        said.append(f"{len(moved)} route(s) re-pointed in place")
    # a new version: the same (GCP's document too: a secret, no longer the VM's metadata)
    stores = [e for e in mine["updated"] + mine["replaced"] if e["type"] in LIVE_STORES]
    if stores and name not in renamed:  # renamed: the stores named after it are new, read by its new gateway
        said.append(f"live document or key updated in place ({', '.join(e['name'] for e in stores)}): no restart, "
                    "the agent applies it")  # fmt: skip
    site = after.site(name)
    if isinstance(site, StaticSite):
        old, new = outputs[0].get(name, {}), outputs[1].get(name, {})
        if after.delivery == "live" and old.get("document") != new.get("document"):
            said.append("its live document changed: copy the new static_site_documents entry (the agent applies it, "
                        "no restart)")  # fmt: skip
        elif after.delivery != "live" and old.get("wg0.conf") != new.get("wg0.conf"):
            said.append("its wg0.conf changed: re-apply wg0.conf (static_site_cloud_init): a restart of the tunnel")
    return said or ["nothing changes for its traffic"]


def change_report(
    before: MeshConfig, after: MeshConfig, found: Diff,
    outputs: tuple[Mapping[str, Mapping[str, str]], Mapping[str, Mapping[str, str]]], site: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The diff as data: created, deleted, replaced (which inputs, by whom, in which order), updated, unchanged,
    and per site what traffic sees. `outputs`: per static site the digests of its wg0.conf and document."""
    names = sorted({s.name for s in before.sites} | {s.name for s in after.sites})

    def kept(found: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        chosen = [e for e in found if site is None or e["site"] == site]
        return sorted(chosen, key=lambda e: (e["site"] or "", e["short_type"], e["name"]))

    entries = {
        "created": kept(_plain(r, names) for r in found.created),
        "deleted": kept(_plain(r, names) for r in found.deleted),
        "replaced": kept(_change(c, names) for c in found.replaced),
        "updated": kept(_change(c, names) for c in found.updated),
    }
    shown = [site] if site is not None else names
    carried = Counter(_site(r, names) for r in found.carried())
    traffic = {name: _traffic(name, entries, before, after, outputs, carried) for name in shown}
    return {**entries, "unchanged": found.unchanged, "traffic": traffic}


def _why(e: Mapping[str, Any]) -> str:
    parts = []
    for k in e["inputs"]:
        text = k + (" (secret)" if k in e["secret_inputs"] else "")
        if k in e["unknown"]:
            text += f" (unknown until up: computed from {e['unknown'][k]})"
        if k in e["forced_by"]:
            text += " [forces replacement" + ("" if e["forced_by"][k] == "provider" else f": {e['forced_by'][k]}") + "]"
        parts.append(text)
    return ", ".join(parts)


def change_text(data: Mapping[str, Any], label: str) -> str:
    lines = [f"wg-mesh plan --before: {label}", "(both configs run under mocks; secret inputs compared by digest, "
             "never printed; a value computed from a new or replaced resource is unknown until up)"]  # fmt: skip
    for kind in ("created", "deleted"):
        lines += ["", f"{kind}: {len(data[kind])}"]
        lines += [f"  {e['short_type']:<28} {e['name']}" for e in data[kind]]
    lines += ["", f"replaced: {len(data['replaced'])}"]
    for e in data["replaced"]:
        lines += [f"  {e['short_type']:<28} {e['name']}  ({e['order']})", f"      {_why(e)}"]
    lines += ["", f"updated in place: {len(data['updated'])}"]
    for e in data["updated"]:
        lines += [f"  {e['short_type']:<28} {e['name']}", f"      {_why(e)}"]
    lines += ["", f"unchanged: {data['unchanged']}", "", "what traffic sees:"]
    for name, said in data["traffic"].items():
        lines.append(f"  {name}:")
        lines += [f"    - {line}" for line in said]
    return "\n".join(lines) + "\n"
