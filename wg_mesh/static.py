"""A bare-metal or VPS site: no cloud resources, only its key and its rendered (secret) config.

Its operator applies the config by hand from the secret stack outputs (`wireguard_configs`,
`static_site_cloud_init`); its public address is the configured `endpoint` (`dynamic`: none, it dials its peers; a
DNS name: its peers' gateways resolve it). With `delivery: live` the cloud-init installs wg-mesh-agent reading two
files the operator keeps current from the secret outputs `static_site_documents` (the signed documents) and
`static_site_private_keys` (wg_mesh.plan.live.STATIC_DOCUMENT_PATH, STATIC_PRIVATE_KEY_PATH); its agent.json pins
the mesh's signing key, so a document edited or written by anyone but `pulumi up` is refused.

A program may give `endpoint` as an Output (wg_mesh.args): the model cannot check it then, so `endpoint_problems`
checks it when its value is known, during `pulumi up`, with the stack file's messages (an invalid one fails the run
as EndpointError). Nothing else depends on its value: the peers' configs and firewalls take it from the directory.
"""

from __future__ import annotations

from ipaddress import IPv4Address

import pulumi

from wg_mesh import component, config
from wg_mesh.config import addressing
from wg_mesh.config.messages import quote
from wg_mesh.config.reach import address_unknown

SITE_TYPE = "wg-mesh:static:Site"


class EndpointError(pulumi.RunError):
    """An endpoint given as an Output whose value the model would have refused: its problems, one line each, as
    MeshConfigError has them. Not a ValueError (as MeshConfigError is): Pulumi would bury one raised while a resource's
    inputs resolve under "While processing input ..." lines; a RunError is printed as it is, without a traceback."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid wg-mesh:mesh configuration:\n" + "\n".join(f"  {p}" for p in problems))


class StaticSiteArgs(component.SiteComponentArgs[config.StaticSite]):
    """A static site component's inputs (wg_mesh.component.SiteComponentArgs)."""


def _known_endpoint(site: config.Site) -> IPv4Address | None:
    endpoint = site.endpoint if isinstance(site, config.StaticSite) else None
    return endpoint if isinstance(endpoint, IPv4Address) else None


def endpoint_problems(mesh: config.MeshConfig, name: str, value: object) -> list[str]:
    """What the model would have said of static site `name`'s endpoint `value` (an Output's value, now known): an
    IPv4 address the internet reaches, outside the overlay and every site's cidrs, no other static site's."""
    index = next(i for i, site in enumerate(mesh.sites) if site.name == name)
    where = f"sites[{index}].endpoint"
    try:
        ip = IPv4Address(value) if isinstance(value, str) else None
    except ValueError:
        ip = None
    if ip is None:
        return [f"{where}: the Output's value {quote(value)} is not an IPv4 address"]
    if (problem := addressing.endpoint_problem(ip)) is not None:
        return [f"{where}: {problem}"]
    same = [f"sites[{i}]" for i, site in enumerate(mesh.sites) if i != index and _known_endpoint(site) == ip]
    if same:
        return [f"{where}: {ip} is already the endpoint of {same[0]}"]
    ranges = [
        addressing.Ranges(f"sites[{i}]", tuple(enumerate(site.cidrs)), ip if i == index else _known_endpoint(site))
        for i, site in enumerate(mesh.sites)
    ]
    return [p for p in addressing.mesh_problems(mesh.overlay_cidr, ranges) if where in p]


class StaticSite(component.SiteComponent):
    def __init__(self, name: str, args: StaticSiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SITE_TYPE, name, None, opts)
        site = args.site
        self._create_identity(name, args.mesh, site, args.directory, args.signing_key)

        def checked(value: object) -> str:
            if problems := endpoint_problems(args.mesh, site.name, value):
                raise EndpointError(problems)
            return str(value)

        given = component.given(site.endpoint) if isinstance(site.endpoint, config.Deferred) else str(site.endpoint)
        # A dynamic site has no address to check or to dial: "dynamic" in the outputs; a DNS-named one its name, never
        # checked as an address (its peers' gateways resolve it). Their configs and firewalls never read it
        # (wg_mesh.plan.topology takes both kinds from the config).
        public = pulumi.Output.from_input(given)
        self.public_ip = public if address_unknown(site) else public.apply(checked)
        self._register_site_outputs()
