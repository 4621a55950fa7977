"""Which cloud provider a site's resources use: the one the caller gave the Mesh, else one wg-mesh builds per site.

Pulumi hands a component's `providers` (and a component's `provider`, which the SDK files into the same map) to every
child registered with `parent=` it, at any depth, unless a child names its own `provider=` (Pulumi docs, "Resource
option: providers": "the providers map is inherited by child resources"; the SDK: `Resource._get_providers`, pulumi
3.272.0 resource.py). wg-mesh's site components used to name their own per-site provider on every child, so a provider
the program chose was silently dropped. Now (README, "Use it from your program", "Providers"):

- an `aws` (`gcp`) provider given to the Mesh (or inherited from the Mesh's parent) is the provider of every AWS (GCP)
  child of every AWS (GCP) site; wg-mesh creates no provider of that package;
- a site that names its own credentials (AWS `profile`, `assume_role_arn`, `account_id`; GCP
  `impersonate_service_account`) and a given provider of its cloud is an error, one line per site: two sources for
  one account, and no way to tell which the caller meant;
- what wg-mesh's own provider set is kept: the site's tags (`managed-by`, site, stack: the gateways' IAM policies
  condition on them) on every AWS child that takes tags, and the gateway's own ready tag ignored on its instance; the
  given provider's `region` (GCP: `project`) must be the site's when it is set (checked while the program runs).

Pure but for the Outputs and the transformation it builds; no resource is created here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from wg_mesh.config import AwsSite, GcpSite, MeshConfig
from wg_mesh.plan.awsiam import site_tags

# The per-site keys that choose a site's account, by the provider package they configure.
CREDENTIAL_KEYS: Mapping[str, tuple[str, ...]] = {
    "aws": ("profile", "assume_role_arn", "account_id"),
    "gcp": ("impersonate_service_account",),
}
_CLOUD_PACKAGE = {"aws": "aws", "gcp": "gcp"}


def given_provider(resource: pulumi.Resource, package: str) -> pulumi.ProviderResource | None:
    """The provider of `package` that the caller gave `resource` (its opts, or inherited from its parents), or None."""
    return resource.get_provider(f"{package}:index:Provider")


def given_packages(opts: pulumi.ResourceOptions | None) -> set[str]:
    """The provider packages a component with these opts hands its children: its `providers` (a list or a map by
    package), its `provider`, and its parent's (the SDK's order: `Resource._get_providers`). Before it registers."""
    if opts is None:
        return set()
    listed = opts.providers
    found = set(listed) if isinstance(listed, Mapping) else {p.package for p in listed or []}
    found |= {opts.provider.package} if opts.provider is not None else set()
    if opts.parent is not None:
        found |= {pkg for pkg in _CLOUD_PACKAGE.values() if opts.parent.get_provider(f"{pkg}:index:Provider")}
    return found


def conflicts(mesh: MeshConfig, packages: set[str]) -> list[str]:
    """One line per site that names its own credentials while the Mesh was given a provider of its cloud."""
    problems = []
    for i, site in enumerate(mesh.sites):
        package = _CLOUD_PACKAGE.get(site.cloud)
        if package is None or package not in packages:
            continue
        named = [key for key in CREDENTIAL_KEYS[package] if getattr(site, key, None) is not None]
        if named:
            problems.append(
                f"sites[{i}] ({site.name}): {', '.join(named)} and the Mesh's `{package}` provider (opts "
                "providers/provider) both choose the account: drop the keys or the provider"
            )
    return problems


class ProviderMismatch(pulumi.RunError):
    """A given provider in another region (GCP: project) than its site's. A RunError (printed without a traceback),
    and not a ValueError, which the SDK would wrap while serializing the output it fails ("While processing input")."""


def _same(site: AwsSite | GcpSite, wanted: Mapping[str, str], values: list[object]) -> str:
    for (what, want), value in zip(wanted.items(), values, strict=True):
        if value is not None and value != want:
            raise ProviderMismatch(
                f"{site.name}: the Mesh's {site.cloud} provider has {what} {value!r}, the site's {what} is {want!r}: "
                "make them the same (or give the site its own credentials and no provider)"
            )
    return site.name


def checked(provider: pulumi.ProviderResource, site: AwsSite | GcpSite) -> pulumi.Output[str]:
    """The site's name once the given provider's region (GCP: project and region) is known to be the site's; failing
    the run if it is another. Unset in the provider (taken from the environment): not checkable here."""
    wanted = {"project": site.project, "region": site.region} if isinstance(site, GcpSite) else {"region": site.region}
    values: list[Any] = [getattr(provider, what, None) for what in wanted]
    return pulumi.Output.all(*values).apply(lambda known: _same(site, wanted, list(known)))


def aws_default_tags(site: AwsSite) -> dict[str, str]:
    """The tags every AWS resource of the site carries (its provider's `default_tags`, or aws_site_tags)."""
    return {"managed-by": "wg-mesh", **site_tags(site.name, pulumi.get_project(), pulumi.get_stack())}


def aws_site_tags(tags: Mapping[str, str], instance_ignores: list[str]) -> pulumi.ResourceTransformation:
    """A transformation for an AWS site whose provider the caller gave: what wg-mesh's own provider's `default_tags`
    and `ignore_tags` did. The site's tags go under each AWS child's own (which win on a common key, as with
    default_tags); the instance ignores `instance_ignores` (the ready tag the gateway sets on itself)."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if not args.type_.startswith("aws:") or "tags" not in args.props:
            return None
        own = pulumi.Output.from_input(args.props["tags"])
        props = {**args.props, "tags": own.apply(lambda t: {**tags, **(t or {})})}
        opts = args.opts
        if args.type_ == "aws:ec2/instance:Instance":
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=instance_ignores))
        return pulumi.ResourceTransformationResult(props, opts)

    return transform
