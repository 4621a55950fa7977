"""The mocks behind wg_mesh.testing: `RecordingMocks` records every resource (type, name, inputs, which inputs
were secret) and every invoke, and answers wg-mesh's invokes (AMI lookups, zone offerings, caller identity, ...)
with deterministic fake cloud values; in preview it returns no computed outputs. Test-only."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockCallArgs, MockResourceArgs

from wg_mesh.tools import serial, stamp

FAKE_PUBLIC_NET = ipaddress.IPv4Network("198.51.100.0/24")  # TEST-NET-2
NOT_OFFERED_TYPE = "x9z.nowhere"  # the mocks say no zone offers this instance type
STASH = "pulumi:index:Stash"
FAKE_STAMP_BASE = 1_767_225_600  # 2026-01-01T00:00:00Z: what a stamp prints is this plus < 2**24 seconds
COMMAND = "command:local:Command"


# --- what the mocks record ------------------------------------------------------------------


def unwrap_secrets(value: Any) -> Any:
    """The plain value of a deserialized property, with Pulumi's secret wrappers removed at any depth."""
    value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, dict):
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


@dataclass(frozen=True)
class Recorded:
    """One resource registration as the engine saw it."""

    type: str
    name: str
    inputs: dict[str, Any]  # plain values (secret wrappers removed); unknowns are pulumi Unknown objects
    secret_inputs: frozenset[str]  # top-level input names whose value was (or contained) a secret
    provider: str
    id: str  # the id the mocks answered with ("" in preview: unknown)
    outputs: dict[str, Any] = field(default_factory=dict)  # the fake computed outputs the mocks answered with

    def public_inputs(self) -> dict[str, Any]:
        return {k: v for k, v in self.inputs.items() if k not in self.secret_inputs}


@dataclass(frozen=True)
class Call:
    """One invoke the program made (`aws:ec2/getAmi:getAmi`, ...): its token, arguments and provider."""

    token: str
    args: dict[str, Any]
    provider: str


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def _hex_id(prefix: str, name: str) -> str:
    return f"{prefix}-{_digest(prefix, name).hex()[:17]}"


class RecordingMocks(pulumi.runtime.Mocks):
    """Records everything and answers like the providers would, deterministically."""

    _ID_PREFIX: ClassVar[dict[str, str]] = {
        "aws:ec2/vpc:Vpc": "vpc",
        "aws:ec2/subnet:Subnet": "subnet",
        "aws:ec2/internetGateway:InternetGateway": "igw",
        "aws:ec2/routeTable:RouteTable": "rtb",
        "aws:ec2/securityGroup:SecurityGroup": "sg",
        "aws:ec2/instance:Instance": "i",
        "aws:ec2/eip:Eip": "eipalloc",
        "aws:ec2/eipAssociation:EipAssociation": "eipassoc",
        "aws:ec2/route:Route": "r",
    }

    newest_ubuntu_serial: ClassVar[str] = "20250101"
    # Zones (names, AWS zone IDs or GCP zones) that do not offer an instance or machine type: a test sets them.
    type_gaps: ClassVar[dict[str, frozenset[str]]] = {}
    # Instance name -> the AMI Pulumi's engine would keep for it (`ignore_changes` on `ami` puts the recorded input in
    # place of the program's, also in a replacement): what an instance created before a type change boots.
    kept_amis: ClassVar[dict[str, str]] = {}
    # AMI ids a test names (pinned by id) -> their DescribeImages architecture; others answer x86_64.
    ami_architectures: ClassVar[dict[str, str]] = {}
    # GCP machine types a test names -> the architecture machineTypes.list reports ("X86_64", "ARM64"); others: ""
    # (none reported, as for legacy types).
    machine_architectures: ClassVar[dict[str, str]] = {}
    # A pulumi.Stash's name -> the value its state keeps from an earlier run (what the engine answers as `output`
    # after the first `up`); a stash not named here answers its input, as the engine does when it creates one.
    kept_stashes: ClassVar[dict[str, Any]] = {}
    # GCP region -> the zones compute.getZones lists (a test's new or lost zone); others: -c, -a, -b.
    gcp_zones: ClassVar[dict[str, list[str]]] = {}

    def __init__(self, preview: bool, prior: Sequence[Recorded] = (), untouched: Collection[str] = ()) -> None:
        self.preview = preview
        # The state of an earlier run (its recorded resources): a Command in it is updated, not created, as the engine
        # and pulumi-command do it (wg_mesh.tools.localcmd); one named in `untouched` keeps its outputs, as a
        # resource a `pulumi up --target` leaves out does.
        self.prior = {r.name: r for r in prior if r.type == COMMAND}
        self.untouched = frozenset(untouched)
        self.resources: list[Recorded] = []
        self.calls: list[Call] = []
        self._ami_architectures: dict[str, str] = {}  # AMI ids answered by name -> their architecture
        self._public_ips: dict[str, str] = {}
        # (type, name) -> the name of the earlier run's resource it is (an alias: wg_mesh.testing.RecordingMonitor),
        # whose id and outputs it is answered with, as a deployed resource keeps them across a rename
        self.seeds: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def fake_public_ip(self, name: str) -> str:
        """A stable address from TEST-NET-2 per resource name (probing on the rare hash collision)."""
        with self._lock:
            if name not in self._public_ips:
                used = set(self._public_ips.values())
                n = int.from_bytes(_digest("ip", name)[:4], "big") % 250 + 2
                while str(FAKE_PUBLIC_NET[n]) in used:
                    n = n % 250 + 2
                self._public_ips[name] = str(FAKE_PUBLIC_NET[n])
            return self._public_ips[name]

    def _computed(self, typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        if typ == "random:index/randomBytes:RandomBytes":
            # Depends on the keepers, as a replacement would: bumping key_epoch gives a new key.
            raw = _digest("random", name, json.dumps(inputs.get("keepers"), sort_keys=True))
            return {"base64": base64.b64encode(raw).decode(), "hex": raw.hex()}
        if typ == "command:local:Command":
            return {"stdout": self._command_stdout(name, inputs), "stderr": ""}
        if typ == "random:index/randomString:RandomString":
            return {"result": _digest("string", name).hex()[: int(inputs["length"])]}
        if typ == "aws:ec2/eip:Eip":
            return {"publicIp": self.fake_public_ip(name), "allocationId": _hex_id("eipalloc", name)}
        if typ in ("aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile"):
            autoname = f"{name}-{_digest('name', name).hex()[:7]}"  # Pulumi's auto-naming: name plus a suffix
            kind = "role" if typ.endswith("Role") else "instance-profile"
            return {"name": autoname, "arn": f"arn:aws:iam::123456789012:{kind}/{autoname}"}
        if typ == "aws:ec2/instance:Instance":
            kept = {"ami": self.kept_amis[name]} if name in self.kept_amis else {}
            return {"primaryNetworkInterfaceId": _hex_id("eni", name), "privateIp": "10.255.0.10", **kept}
        if typ == "gcp:compute/address:Address":
            autoname = f"{name}-{_digest('name', name).hex()[:7]}"  # Pulumi's auto-naming: name plus a suffix
            link = self._self_link("regions", "addresses", autoname)
            if inputs.get("addressType") == "INTERNAL":  # the requested address, or one GCP would pick
                return {"address": inputs.get("address") or "10.255.0.2", "selfLink": link, "name": autoname}
            return {"address": self.fake_public_ip(name), "selfLink": link, "name": autoname}
        if typ == "gcp:compute/instance:Instance":
            # GCP picks the internal address unless one is requested.
            nics = [{"networkIp": "10.255.0.3", **nic} for nic in inputs.get("networkInterfaces", [])]
            autoname = f"{name}-{_digest('name', name).hex()[:7]}"  # Pulumi's auto-naming: name plus a suffix
            link = self._self_link("zones", "instances", name)
            return {"selfLink": link, "networkInterfaces": nics, "name": autoname}
        if typ == "aws:ssm/parameter:Parameter":
            return {"arn": f"arn:aws:ssm:us-east-1:123456789012:parameter{inputs['name']}"}
        if typ == "aws:secretsmanager/secret:Secret":  # AWS appends 6 random characters to a secret's ARN
            suffix = _digest("secret", name).hex()[:6]
            return {"arn": f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{inputs['name']}-{suffix}"}
        if typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@mock.iam.gserviceaccount.com"
            return {
                "email": email,
                "member": f"serviceAccount:{email}",
                "name": f"projects/mock/serviceAccounts/{email}",
            }
        if typ == "gcp:secretmanager/secret:Secret":
            return {"name": f"projects/123456789/secrets/{inputs['secretId']}"}
        if typ == "gcp:compute/instanceGroup:InstanceGroup":
            return {"selfLink": self._self_link("zones", "instanceGroups", inputs["name"])}
        if typ in (
            "gcp:compute/regionBackendService:RegionBackendService",
            "gcp:compute/regionHealthCheck:RegionHealthCheck",
        ):
            kind = "backendServices" if "Backend" in typ else "healthChecks"
            return {"selfLink": self._self_link("regions", kind, inputs["name"])}
        if typ == "gcp:compute/forwardingRule:ForwardingRule":
            return {
                "selfLink": self._self_link("regions", "forwardingRules", inputs["name"]),
                "ipAddress": "10.255.0.9",
            }
        if typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
            return {"name": f"projects/{inputs['project']}/roles/{inputs['roleId']}"}
        if typ == "aws:ec2/vpcEndpoint:VpcEndpoint" and inputs.get("vpcEndpointType") == "Interface":
            # An interface endpoint's DNS entries (AWS PrivateLink): one per zone, then the Regional name.
            _, _, region, service = inputs["serviceName"].split(".", 3)
            prefix = f"{_hex_id('vpce', name)}-{_digest('vpce', name).hex()[:8]}"
            names = [f"{prefix}-{region}{z}.{service}.{region}.vpce.amazonaws.com" for z in "ab"]
            names.append(f"{prefix}.{service}.{region}.vpce.amazonaws.com")
            return {"dnsEntries": [{"dnsName": n, "hostedZoneId": "Z7HUB22UULQXV"} for n in names]}
        if typ == "aws:dynamodb/table:Table":
            return {"arn": f"arn:aws:dynamodb:us-east-1:123456789012:table/{inputs['name']}"}
        if typ in ("gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork"):
            kind = "networks" if typ.endswith("Network") else "subnetworks"
            return {"selfLink": self._self_link("global" if kind == "networks" else "regions", kind, name)}
        return {}

    def _preview_outputs(self, typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        before = self.prior.get(name) if typ == COMMAND else None
        if before is None:
            return {}
        counter = inputs.get("update") == serial.COUNTER_UPDATE  # updated, never replaced
        if counter or before.inputs.get("triggers") == inputs.get("triggers"):
            return {"stdout": before.outputs.get("stdout", ""), "stderr": ""}
        return {}

    def _command_stdout(self, name: str, inputs: dict[str, Any]) -> str:
        """What a Command of this program prints (wg_mesh.tools.serial, wg_mesh.tools.stamp), created or updated from
        its state in `prior` as pulumi-command runs it; a readiness gate prints nothing the program reads."""
        before = self.prior.get(name)
        old = str(before.outputs.get("stdout", "")) if before is not None else None
        if old is not None and name in self.untouched:
            return old
        environment = inputs.get("environment") or {}
        kept = old if before is not None and before.inputs.get("triggers") == inputs.get("triggers") else None
        if inputs.get("update") == serial.COUNTER_UPDATE:  # never replaced (ignore_changes: triggers)
            digest = environment[serial.CONTENT_ENV]
            if old is None:
                return f"1 {digest}"
            number, recorded = serial.parse_counter(old)
            return old if recorded == digest else f"{number + 1} {digest}"
        if inputs.get("create") == serial.PIN_CREATE:
            return kept if kept is not None else str(environment[serial.SERIAL_ENV])
        if inputs.get("create") == stamp.CREATE:
            # The time it ran: here a moment that depends on its name and triggers, as a replacement's would.
            raw = _digest("command", name, json.dumps(inputs.get("triggers"), sort_keys=True))
            return kept if kept is not None else f"{FAKE_STAMP_BASE + int.from_bytes(raw[:3], 'big')}"
        return ""

    @staticmethod
    def _self_link(scope: str, kind: str, name: str) -> str:
        where = "global" if scope == "global" else f"{scope}/somewhere"
        return f"https://www.googleapis.com/compute/v1/projects/mock/{where}/{kind}/{name}"

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = unwrap_secrets(args.inputs)
        secret = frozenset(k for k, v in args.inputs.items() if rpc.is_rpc_secret(v))
        seed = self.seeds.get((args.typ, args.name), args.name)
        if args.typ.startswith("pulumi:providers:"):
            resource_id: str = f"{args.name}-id"
            computed: dict[str, Any] = {}
        elif args.typ == STASH:
            # The engine's built-in Stash (pulumi/pulumi pkg/resource/deploy/builtins.go): created, `output` is the
            # input, also in a preview; updated, `output` stays what the state has and only `input` follows.
            resource_id = "" if self.preview else _hex_id("stash", args.name)
            computed = {"output": self.kept_stashes.get(args.name, inputs.get("input"))}
        elif self.preview:
            # What `pulumi preview` gets for a resource to create: its inputs, no id, no computed outputs; for a
            # Command to update, its outputs so far (pulumi-command runs nothing in a preview).
            resource_id, computed = "", self._preview_outputs(args.typ, args.name, inputs)
        else:
            resource_id = _hex_id(self._ID_PREFIX.get(args.typ, args.typ.rsplit(":", 1)[-1].lower()), seed)
            computed = self._computed(args.typ, seed, inputs)
        with self._lock:
            self.resources.append(
                Recorded(args.typ, args.name, inputs, secret, args.provider or "", resource_id, computed),
            )
        return resource_id, {**args.inputs, **computed}

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        plain = unwrap_secrets(args.args)
        with self._lock:
            self.calls.append(Call(args.token, plain, args.provider or ""))
        if args.token == "aws:ec2/getAmi:getAmi":
            (what,) = plain["filters"][0]["values"]
            if plain["filters"][0]["name"] == "image-id":  # an AMI by id: Canonical's from a name lookup, or a test's
                arch = self.ami_architectures.get(what) or self._ami_architectures.get(what, "x86_64")
                return {"id": what, "architecture": arch, "name": f"image {what}"}, []
            arch = "arm64" if "-arm64-" in what else "x86_64"
            # The newest image for a wildcard is NEWEST_UBUNTU_SERIAL's: a test can publish a newer one.
            name = what.replace("*", self.newest_ubuntu_serial)
            with self._lock:
                self._ami_architectures[_hex_id("ami", name)] = arch
            return {"id": _hex_id("ami", name), "architecture": arch, "name": name}, []
        if args.token == "aws:ec2/getSubnet:getSubnet":
            # A subnet of this run (its zone as created), else a given one: in the region's "b" zone.
            subnets = [r for r in self.resources if r.id == plain["id"]]
            zone = subnets[0].inputs.get("availabilityZone") if subnets else None
            zone = zone or f"{plain['region']}b"
            return {"id": plain["id"], "availabilityZone": zone, "vpcId": "vpc-given"}, []
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            # Zones listed out of order and without the "a" zone, so a choice by sorting is visible;
            # NOT_OFFERED_TYPE is offered nowhere. Asked for a location: offered there, but for a test's type_gaps.
            filters = {f["name"]: f["values"] for f in plain["filters"]}
            (wanted,) = filters["instance-type"]
            region = plain["region"]
            zones = [] if wanted == NOT_OFFERED_TYPE else filters.get("location", [f"{region}c", f"{region}b"])
            zones = [z for z in zones if z not in self.type_gaps.get(wanted, frozenset())]
            kinds = [plain["locationType"]] * len(zones)
            return {"locations": zones, "locationTypes": kinds, "instanceTypes": [wanted] * len(zones)}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/mock", "userId": "AIDAMOCK"}, []
        if args.token == "gcp:compute/getMachineTypes:getMachineTypes":
            # One machine type by name (`name = "n2-standard-8"`), offered in every zone but a test's type_gaps.
            wanted = plain["filter"].split("=", 1)[1].strip().strip('"')
            offered = wanted != NOT_OFFERED_TYPE and plain["zone"] not in self.type_gaps.get(wanted, frozenset())
            link = self._self_link("zones", "machineTypes", wanted)
            found = {"name": wanted, "selfLink": link, "guestCpus": 8, "memoryMb": 32768, "isSharedCpus": False}
            found |= {"accelerators": [], "bundledLocalSsds": [], "deprecateds": [], "description": wanted}
            found |= {"architecture": self.machine_architectures.get(wanted, "")}
            found |= {"maximumPersistentDisks": 128, "maximumPersistentDisksSizeGb": 263168}
            return {"machineTypes": [found] if offered else [], "zone": plain["zone"], "id": "mock"}, []
        if args.token == "gcp:compute/getZones:getZones":
            region = plain["region"]
            names = self.gcp_zones.get(region, [f"{region}-c", f"{region}-a", f"{region}-b"])
            return {"names": list(names), "project": plain.get("project")}, []
        if args.token == "aws:index/getServicePrincipal:getServicePrincipal":
            suffix = "amazonaws.com.cn" if plain["region"].startswith("cn-") else "amazonaws.com"
            return {"name": f"{plain['serviceName']}.{suffix}", "suffix": suffix, "id": plain["serviceName"]}, []
        raise NotImplementedError(f"no mock for invoke {args.token}")
