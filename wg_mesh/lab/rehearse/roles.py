"""What each resource the program declares is to the lab's clouds: pure, from its type and name (the program names
every child `<site>-<suffix>`, gateway b's `<site>-b-<suffix>`: wg_mesh.plan.ha.child_name) and its inputs.

A rehearsal (wg_mesh.lab.rehearse.run) turns each of `pulumi up`'s steps (wg_mesh.plan.engine) on a resource into
what that resource does to traffic in the lab:

    instance   a gateway machine (AWS instance, GCE VM): created beside the old, started; deleted at the end
    gate       its readiness gate (a pulumi-command Command): waits for the new machine; on a single GCP gateway it
               also moves the static address (wg_mesh.tools.gcpgate)
    associate  the Elastic IP's association with gateway a (AWS, single gateway)
    address    the public address itself (Elastic IP, GCP static address): replaced or deleted, it is a new address
    route      one VPC route of a remote range through the gateway (AWS Route, GCP Route)
    group      an HA GCP site's instance group (its member: the ILB's backend)
    document   the live peer document's store (a secret version: Secrets Manager on AWS, Secret Manager on GCP, which
               every machine of the site reads)
    key        the live private key's store (SSM parameter, GCP secret version)
    agent      the live agent's package (AWS secret version)
    cloud      everything else (security groups, firewalls, IAM, networks, stamps, keys' seeds): no effect the lab
               models on traffic; the report lists its steps

Every type the program creates is covered (tests/test_rehearse_roles.py, over every stack in the repository).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wg_mesh.plan.preview import Resource, site_of

AWS_INSTANCE = "aws:ec2/instance:Instance"
GCP_INSTANCE = "gcp:compute/instance:Instance"
COMMAND = "command:local:Command"

# type -> (role, the name's suffix after `<site>[-b]-`) ; a suffix pattern, matched whole
_ROLES: tuple[tuple[str, str, str], ...] = (
    (AWS_INSTANCE, "instance", r"instance(-arm64)?"),
    (GCP_INSTANCE, "instance", r"instance(-[0-9a-f]{8})?"),  # with gateways: 2, the stack's scope (plan.ha.vm_name)
    (COMMAND, "gate", r"ready"),
    ("aws:ec2/eipAssociation:EipAssociation", "associate", r"eip-assoc"),
    ("aws:ec2/eip:Eip", "address", r"eip"),
    ("gcp:compute/address:Address", "address", r"address"),
    ("aws:ec2/route:Route", "route", r"route-\d+-[0-9-]+"),
    ("gcp:compute/route:Route", "route", r"to-[0-9-]+"),
    ("gcp:compute/instanceGroup:InstanceGroup", "group", r"ig"),
    ("aws:secretsmanager/secretVersion:SecretVersion", "document", r"peers-version"),
    ("aws:secretsmanager/secretVersion:SecretVersion", "agent", r"agent-version"),
    ("gcp:secretmanager/secretVersion:SecretVersion", "document", r"peers-version"),
    ("aws:ssm/parameter:Parameter", "key", r"private-key"),
    ("gcp:secretmanager/secretVersion:SecretVersion", "key", r"key-version"),
)
ROLES = ("instance", "gate", "associate", "address", "route", "group", "document", "key", "agent", "cloud")


@dataclass(frozen=True)
class Role:
    role: str
    site: str | None  # None: mesh-wide (the signing key, the providers' resources)
    letter: str = "a"  # the gateway the resource belongs to (`<site>-b-...`: b)
    cidr: str | None = None  # route: the remote range

    def __str__(self) -> str:
        where = self.site or "mesh"
        return (
            f"{self.role} {where}"
            + (f"-{self.letter}" if self.letter != "a" else "")
            + (f" {self.cidr}" if self.cidr else "")
        )


def _route_cidr(resource: Resource) -> str | None:
    inputs: Mapping[str, Any] = resource.inputs
    value = inputs.get("destinationCidrBlock", inputs.get("destRange"))
    return value if isinstance(value, str) else None


def role_of(resource: Resource, sites: Iterable[str]) -> Role:
    """The resource's role in the lab (module docstring); `sites`: every site name of both configs (and the
    previous names the aliases carry), to find whose it is."""
    site = site_of(resource.name, list(sites))
    if site is None:
        return Role("cloud", None)
    rest = resource.name[len(site) :].lstrip("-")
    letter = "a"
    if rest.startswith("b-"):
        letter, rest = "b", rest[2:]
    for typ, role, suffix in _ROLES:
        if resource.type == typ and re.fullmatch(suffix, rest):
            return Role(role, site, letter, _route_cidr(resource) if role == "route" else None)
    return Role("cloud", site, letter)
