"""The inputs whose change makes the provider replace a resource ("force-new"), per resource type the program creates.

Pulumi's engine learns these from the provider's Diff; the mocks cannot, so `wg-mesh plan` reads them here. Each
bridged type wraps a Terraform resource: its inputs with `ForceNew: true` in the Terraform provider's schema (SDKv2)
or a `RequiresReplace` plan modifier (plugin framework), named here as Pulumi names them (camelCase; a Terraform block
that is a list is plural in Pulumi: `network_interface` is `networkInterfaces`, `allow` is `allows`).

Nested fields: an input is listed when it, or any field under it, forces a new resource, so a change anywhere under
it is reported as a replacement (conservative: `bootDisk` is listed because `boot_disk.initialize_params.image` is
force-new, though `boot_disk.auto_delete` alone would update in place). What a provider's CustomizeDiff adds at run
time (e.g. terraform-provider-google's network-IP checks) is not here.

Sources (SOURCES): terraform-provider-google at the commit below (the 8.0.0 major merged; pulumi-gcp 10.x wraps
terraform-provider-google-beta 8.x, generated from the same magic-modules), read with a parser of the schema files;
terraform-provider-aws's ec2/ec2_instance.go, ec2/vpc_route.go and secretsmanager/secret_version.go at the commits
named (pulumi-aws 7.x wraps terraform-provider-aws 6.x; the stored versions read are older 5.x ones); the other AWS
types from the same provider's files named below, by their schema's ForceNew fields (not re-read for this table:
marked `read=False`), as are random's and command's.
A type the program creates that is missing here fails tests/test_plan_forcenew.py.
"""

from __future__ import annotations

from dataclasses import dataclass

GOOGLE = "hashicorp/terraform-provider-google@e03b7622a26cf4e878f90bdccaca6aa3d03a7999 (2026-08-21, 8.0.0 merged)"
AWS = "hashicorp/terraform-provider-aws@0015dfcd06d5d78e5e1c3cabe8cea837d379d1c7"
AWS_V6 = "hashicorp/terraform-provider-aws v6 (pulumi-aws 7.x)"
RANDOM = "hashicorp/terraform-provider-random (plugin framework: RequiresReplace on every attribute)"
COMMAND = "pulumi/pulumi-command provider/pkg/provider/local (`triggers`: replaceOnChanges)"


@dataclass(frozen=True)
class ForceNew:
    inputs: frozenset[str]  # top-level Pulumi input names (see the module's note on nested fields)
    source: str  # repository@commit or version
    path: str  # the schema's file in that repository ("" for none)
    read: bool = True  # read from the file for this table (False: the provider's documented schema, not re-read)
    note: str = ""


def _fn(inputs: str, source: str, path: str, read: bool = True, note: str = "") -> ForceNew:
    return ForceNew(frozenset(inputs.split()), source, path, read, note)


_G = "google/services/"
_A = "internal/service/"
NONE = "neither a cloud resource nor a diff of its own"
TABLE: dict[str, ForceNew] = {
    # --- AWS (terraform-provider-aws) ---
    "aws:ec2/instance:Instance": _fn(
        "ami associatePublicIpAddress availabilityZone cpuCoreCount cpuOptions cpuThreadsPerCore ebsBlockDevices "
        "ebsOptimized enclaveOptions ephemeralBlockDevices hibernation hostId ipv6AddressCount ipv6Addresses keyName "
        "launchTemplate networkInterfaces placementGroup placementPartitionNumber privateDnsNameOptions privateIp "
        "rootBlockDevice securityGroups subnetId tenancy",
        AWS,
        _A + "ec2/ec2_instance.go",
        note="userDataBase64 replaces only with user_data_replace_on_change (the program sets it); instanceType "
        "updates in place (stop/start) unless the program's replace_on_changes names it",
    ),
    "aws:ec2/eip:Eip": _fn(
        "address customerOwnedIpv4Pool domain ipamPoolId networkBorderGroup publicIpv4Pool", AWS_V6,
        _A + "ec2/ec2_eip.go", read=False),
    "aws:ec2/eipAssociation:EipAssociation": _fn(
        "allocationId allowReassociation instanceId networkInterfaceId privateIpAddress publicIp", AWS_V6,
        _A + "ec2/ec2_eip_association.go", read=False, note="no Update: every input forces a new association"),
    "aws:ec2/internetGateway:InternetGateway": _fn("", AWS_V6, _A + "ec2/vpc_internet_gateway.go", read=False),
    "aws:ec2/route:Route": _fn(
        "destinationCidrBlock destinationIpv6CidrBlock destinationPrefixListId routeTableId",
        "hashicorp/terraform-provider-aws@0128541e0711766f28540143a9d73738aced60aa", _A + "ec2/vpc_route.go",
        note="a new target (networkInterfaceId) is a ReplaceRoute in place"),
    "aws:ec2/routeTable:RouteTable": _fn("vpcId", AWS_V6, _A + "ec2/vpc_route_table.go", read=False),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _fn(
        "gatewayId subnetId", AWS_V6, _A + "ec2/vpc_route_table_association.go", read=False),
    "aws:ec2/securityGroup:SecurityGroup": _fn(
        "description name namePrefix vpcId", AWS_V6, _A + "ec2/vpc_security_group.go", read=False),
    "aws:ec2/subnet:Subnet": _fn(
        "availabilityZone availabilityZoneId cidrBlock ipv4IpamPoolId outpostArn vpcId", AWS_V6,
        _A + "ec2/vpc_subnet.go", read=False),
    "aws:ec2/tag:Tag": _fn("key resourceId", AWS_V6, _A + "ec2/ec2_tag.go", read=False),
    "aws:ec2/vpc:Vpc": _fn(
        "cidrBlock ipv4IpamPoolId ipv4NetmaskLength", AWS_V6, _A + "ec2/vpc_.go", read=False),
    "aws:ec2/vpcEndpoint:VpcEndpoint": _fn(
        "serviceName vpcEndpointType vpcId", AWS_V6, _A + "ec2/vpc_endpoint.go", read=False),
    "aws:iam/instanceProfile:InstanceProfile": _fn(
        "name namePrefix path", AWS_V6, _A + "iam/instance_profile.go", read=False),
    "aws:iam/role:Role": _fn("name namePrefix path", AWS_V6, _A + "iam/role.go", read=False),
    "aws:iam/rolePolicy:RolePolicy": _fn("name namePrefix role", AWS_V6, _A + "iam/role_policy.go", read=False),
    "aws:secretsmanager/secret:Secret": _fn(
        "name namePrefix", AWS_V6, _A + "secretsmanager/secret.go", read=False),
    "aws:secretsmanager/secretVersion:SecretVersion": _fn(
        "secretBinary secretId secretString",
        "hashicorp/terraform-provider-aws@3007dfc3b5ae1a899b9f3c256ed125632f9b4df5",
        _A + "secretsmanager/secret_version.go", note="a new value is a new version (AWSCURRENT moves to it)"),
    "aws:ssm/parameter:Parameter": _fn("dataType name", AWS_V6, _A + "ssm/parameter.go", read=False),
    "aws:dynamodb/table:Table": _fn(
        "hashKey name rangeKey", AWS_V6, _A + "dynamodb/table.go", read=False),
    # --- GCP (terraform-provider-google) ---
    "gcp:compute/address:Address": _fn(
        "address addressType description ipCollection ipVersion ipv6EndpointType name network networkTier "
        "prefixLength project purpose region subnetwork", GOOGLE, _G + "compute/resource_compute_address.go"),
    "gcp:compute/firewall:Firewall": _fn(
        "direction name params project", GOOGLE, _G + "compute/resource_compute_firewall.go"),
    "gcp:compute/forwardingRule:ForwardingRule": _fn(
        "allPorts backendService description ipAddress ipCollection ipProtocol ipVersion isMirroringCollector "
        "loadBalancingScheme name network networkTier noAutomateDnsZone portRange ports project region "
        "serviceDirectoryRegistrations serviceLabel sourceIpRanges subnetwork", GOOGLE,
        _G + "compute/resource_compute_forwarding_rule.go"),
    "gcp:compute/instance:Instance": _fn(
        "advancedMachineFeatures attachedDisks bootDisk confidentialInstanceConfig guestAccelerators hostname "
        "instanceEncryptionKey keyRevocationActionType name networkInterfaces networkPerformanceConfig params "
        "project reservationAffinity scheduling scratchDisks workloadIdentityConfig zone", GOOGLE,
        _G + "compute/resource_compute_instance.go",
        note="machineType and metadata update in place (stop/start with allowStoppingForUpdate) unless the "
        "program's replace_on_changes names them"),
    "gcp:compute/instanceGroup:InstanceGroup": _fn(
        "description name network project zone", GOOGLE, _G + "compute/resource_compute_instance_group.go"),
    "gcp:compute/network:Network": _fn(
        "autoCreateSubnetworks description internalIpv6Range name networkProfile params project", GOOGLE,
        _G + "compute/resource_compute_network.go"),
    "gcp:compute/regionBackendService:RegionBackendService": _fn(
        "haPolicy loadBalancingScheme name network params project", GOOGLE,
        _G + "compute/resource_compute_region_backend_service.go"),
    "gcp:compute/regionHealthCheck:RegionHealthCheck": _fn(
        "name project region", GOOGLE, _G + "compute/resource_compute_region_health_check.go"),
    "gcp:compute/route:Route": _fn(
        "description destRange name network nextHopGateway nextHopIlb nextHopInstance nextHopInstanceZone "
        "nextHopIp nextHopVpnTunnel params priority project tags", GOOGLE, _G + "compute/resource_compute_route.go",
        note="every input: a GCP route cannot be updated"),
    "gcp:compute/subnetwork:Subnetwork": _fn(
        "description externalIpv6Prefix internalIpv6Prefix name network params project region "
        "reservedInternalRange resolveSubnetMask", GOOGLE, _G + "compute/resource_compute_subnetwork.go"),
    "gcp:projects/iAMCustomRole:IAMCustomRole": _fn(
        "project roleId", GOOGLE, _G + "resourcemanager/resource_google_project_iam_custom_role.go"),
    "gcp:projects/iAMMember:IAMMember": _fn(
        "condition member project role", GOOGLE,
        "google/tpgiamresource/resource_iam_member.go, " + _G + "resourcemanager/iam_project.go"),
    "gcp:secretmanager/secret:Secret": _fn(
        "project replication secretId tags", GOOGLE, _G + "secretmanager/resource_secret_manager_secret.go"),
    "gcp:secretmanager/secretIamMember:SecretIamMember": _fn(
        "condition member project role secretId", GOOGLE,
        "google/tpgiamresource/resource_iam_member.go, " + _G + "secretmanager/iam_secret_manager_secret.go"),
    "gcp:secretmanager/secretVersion:SecretVersion": _fn(
        "isSecretDataBase64 project secret secretData secretDataWoVersion", GOOGLE,
        _G + "secretmanager/resource_secret_manager_secret_version.go"),
    "gcp:serviceaccount/account:Account": _fn(
        "accountId project", GOOGLE, _G + "resourcemanager/resource_google_service_account.go"),
    # --- random, command ---
    "random:index/randomBytes:RandomBytes": _fn("keepers length", RANDOM, "internal/provider/resource_bytes.go",
                                                read=False),
    "random:index/randomString:RandomString": _fn(
        "keepers length lower minLower minNumeric minSpecial minUpper number numeric overrideSpecial special upper",
        RANDOM, "internal/provider/resource_string.go", read=False),
    "command:local:Command": _fn("triggers", COMMAND, "provider/pkg/provider/local/commandInputs.go", read=False,
                                 note="a new `create` runs it again in place (an update), not a replacement"),
}  # fmt: skip
# Not cloud resources: the program's components and its explicit providers (a provider's own config change is an
# update of the provider; the resources it manages follow their own inputs, above).
NOT_RESOURCES = ("wg-mesh:", "pulumi:providers:")


def covered(typ: str) -> bool:
    return typ in TABLE or typ.startswith(NOT_RESOURCES)


def force_new(typ: str) -> frozenset[str]:
    """The inputs of `typ` whose change replaces it; KeyError for a type the table does not cover (never "none")."""
    if typ.startswith(NOT_RESOURCES):
        return frozenset()
    return TABLE[typ].inputs
