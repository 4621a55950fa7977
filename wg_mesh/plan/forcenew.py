"""The inputs whose change makes the provider replace a resource ("force-new"), per resource type the program creates.

Pulumi's engine learns these from the provider's Diff; the mocks cannot, so `wg-mesh plan` reads them here. Each
bridged type wraps a Terraform resource: its inputs with `ForceNew: true` in the Terraform provider's schema (SDKv2)
or a `RequiresReplace` plan modifier (plugin framework), named here as Pulumi names them (camelCase; a Terraform block
that is a list is plural in Pulumi: `network_interface` is `networkInterfaces`, `allow` is `allows`).

Nested fields: an input is listed when it, or any field under it, forces a new resource, so a change anywhere under
it is reported as a replacement (conservative: `bootDisk` is listed because `boot_disk.initialize_params.image` is
force-new, though `boot_disk.auto_delete` alone would update in place). What a provider's CustomizeDiff adds at run
time (e.g. terraform-provider-google's network-IP checks) is not here.

Sources: each entry names the repository@commit of the file it was read from (`path`). terraform-provider-google
at the commit below (the 8.0.0 major merged; pulumi-gcp 10.x wraps terraform-provider-google-beta 8.x, generated from
the same magic-modules), read with a parser of the schema files. terraform-provider-aws: pulumi-aws 7.x wraps its 6.x;
the index stores each file at one or a few commits, not one release: the vpc_subnet, vpc_endpoint, vpc_security_group,
ec2_eip, ssm/parameter and iam/instance_profile files read are 6.x ones (`@Testing(preIdentityVersion="v6.x")`, 2026
copyright), the others older 5.x (or 4.x, 3.x: named in their note) whose ForceNew fields a newer stored text, where
one was found, confirms. The `region` input every 6.x AWS resource has forces a new one by a CustomizeDiff (not
listed: the program sets the provider's region, never a resource's). terraform-provider-random's plugin-framework
schemas (RequiresReplace) and pulumi-command's `triggers` tag (`provider:"replaceOnChanges"`) at the commits named.
A type the program creates that is missing here fails tests/test_plan_forcenew.py.
"""

from __future__ import annotations

from dataclasses import dataclass

GOOGLE = "hashicorp/terraform-provider-google@e03b7622a26cf4e878f90bdccaca6aa3d03a7999 (2026-08-21, 8.0.0 merged)"
AWS = "hashicorp/terraform-provider-aws@"
RANDOM = "hashicorp/terraform-provider-random@"
COMMAND = "pulumi/pulumi-command@"


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
        "ami associatePublicIpAddress availabilityZone cpuOptions ebsBlockDevices ebsOptimized enclaveOptions "
        "ephemeralBlockDevices hibernation hostId ipv6AddressCount ipv6Addresses keyName launchTemplate "
        "networkInterfaces placementGroup placementPartitionNumber privateDnsNameOptions privateIp rootBlockDevice "
        "securityGroups subnetId tenancy",
        AWS + "0015dfcd06d5d78e5e1c3cabe8cea837d379d1c7", _A + "ec2/ec2_instance.go",
        note="5.x source; its force-new cpu_core_count and cpu_threads_per_core are not in the pinned SDK (6.x "
        "removed them: cpuOptions); 6.x-only inputs (primaryNetworkInterface, placementGroupId, ...) not read. "
        "userDataBase64 replaces only with user_data_replace_on_change (the program sets it); instanceType "
        "updates in place (stop/start) unless the program's replace_on_changes names it"),
    "aws:ec2/eip:Eip": _fn(
        "address domain ipamPoolId networkBorderGroup publicIpv4Pool",
        AWS + "01606926a0c0ab9174aec440f976a48b0baee722", _A + "ec2/ec2_eip.go",
        note="6.x; customerOwnedIpv4Pool is not force-new; instance/networkInterface re-associate in place"),
    "aws:ec2/eipAssociation:EipAssociation": _fn(
        "allocationId allowReassociation instanceId networkInterfaceId privateIpAddress publicIp",
        AWS + "01c08000ddb14181b5bd19201d8fca311dc570e4", _A + "ec2/ec2_eip_association.go",
        note="5.x; a newer stored text (SDK v2) agrees; no Update: every input forces a new association"),
    "aws:ec2/internetGateway:InternetGateway": _fn(
        "", AWS + "08923b68b5ad6fcfdd38362fb5247e39a9b07add", _A + "ec2/vpc_internet_gateway.go",
        note="5.x; a new vpcId detaches and attaches in place"),
    "aws:ec2/route:Route": _fn(
        "destinationCidrBlock destinationIpv6CidrBlock destinationPrefixListId routeTableId",
        AWS + "0128541e0711766f28540143a9d73738aced60aa", _A + "ec2/vpc_route.go",
        note="a new target (networkInterfaceId) is a ReplaceRoute in place"),
    "aws:ec2/routeTable:RouteTable": _fn(
        "vpcId", AWS + "022092419b7cda11527df3c6b51cbfe1876c1722", _A + "ec2/vpc_route_table.go",
        note="5.x; routes and propagatingVgws update in place"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _fn(
        "gatewayId subnetId", AWS + "0be71beb458ad8875e0acc5c91519c0ceeb214aa",
        _A + "ec2/vpc_route_table_association.go",
        note="5.x; a new routeTableId is a ReplaceRouteTableAssociation in place"),
    "aws:ec2/securityGroup:SecurityGroup": _fn(
        "description name namePrefix vpcId", AWS + "01606926a0c0ab9174aec440f976a48b0baee722",
        _A + "ec2/vpc_security_group.go", note="6.x; ingress and egress rules update in place"),
    "aws:ec2/subnet:Subnet": _fn(
        "availabilityZone availabilityZoneId cidrBlock ipv4IpamPoolId ipv4NetmaskLength ipv6IpamPoolId ipv6Native "
        "ipv6NetmaskLength outpostArn vpcId",
        AWS + "00cda125a19d31754cb0d073cf551264c57955cb", _A + "ec2/vpc_subnet.go",
        note="6.x; a CustomizeDiff also replaces it for a new ipv6CidrBlock once assignIpv6AddressOnCreation was on"),
    "aws:ec2/tag:Tag": _fn(
        "key resourceId", AWS + "299594d1f62af7947b7512eb6ac17a096ba30217", "aws/resource_aws_ec2_tag.go",
        note="3.x layout: the file under internal/service/ec2 is not stored; a new value updates in place"),
    "aws:ec2/vpc:Vpc": _fn(
        "cidrBlock ipv4IpamPoolId ipv4NetmaskLength", AWS + "00081ce41cc691433ac19bf42227cdabffd0454d",
        _A + "ec2/vpc_.go", note="5.x (SDK v2)"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": _fn(
        "dnsOptions resourceConfigurationArn serviceName serviceNetworkArn serviceRegion vpcEndpointType vpcId",
        AWS + "008db85aad5e56627b1eecab8830464a282552ed", _A + "ec2/vpc_endpoint.go",
        note="6.x; dnsOptions for its privateDnsPreference and privateDnsSpecifiedDomains; a CustomizeDiff also "
        "replaces a non-Interface endpoint for a new privateDnsEnabled (the program sets it on the Interface one)"),
    "aws:iam/instanceProfile:InstanceProfile": _fn(
        "name namePrefix path", AWS + "013f1736b90439e5a19567a87d3e5cd11858c420", _A + "iam/instance_profile.go",
        note="6.x; a new role is swapped in place"),
    "aws:iam/role:Role": _fn(
        "name namePrefix path", AWS + "0040ea6911af00bea2cca6dbb14e86829826ad8e", _A + "iam/role.go",
        note="4.x; a newer stored text (6.x: @V60SDKv2Fix) agrees"),
    "aws:iam/rolePolicy:RolePolicy": _fn(
        "name namePrefix role", AWS + "02f97af85f89a04e8ed89f5e8b64a9a67f3cfe07", _A + "iam/role_policy.go",
        note="5.x; a new policy is a PutRolePolicy in place"),
    "aws:secretsmanager/secret:Secret": _fn(
        "name namePrefix", AWS + "00c21cedec069dd27093b175baf15bac6d4b30fe", _A + "secretsmanager/secret.go",
        note="5.x (SDK v2)"),
    "aws:secretsmanager/secretVersion:SecretVersion": _fn(
        "secretBinary secretId secretString", AWS + "3007dfc3b5ae1a899b9f3c256ed125632f9b4df5",
        _A + "secretsmanager/secret_version.go", note="a new value is a new version (AWSCURRENT moves to it)"),
    "aws:ssm/parameter:Parameter": _fn(
        "dataType name", AWS + "0073593e7d6993ba482409f4dc35438daaa79bb3", _A + "ssm/parameter.go",
        note="6.x; a CustomizeDiff also replaces it for a tier change from Advanced to Standard"),
    "aws:dynamodb/table:Table": _fn(
        "hashKey importTable localSecondaryIndexes name rangeKey restoreDateTime restoreToLatestTime",
        AWS + "01335dd3cd3dff10ace08b5250b7302d4dbb0e04", _A + "dynamodb/table.go",
        note="4.x at that commit; the list is from a newer stored text (6.x: global_table_witness; the index gives "
        "no commit for it), where restoreSourceName/restoreSourceTableArn (set to another value) and a lower "
        "warmThroughput replace by CustomizeDiff; the pinned SDK's restoreBackupArn is in no stored text"),
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
    "random:index/randomBytes:RandomBytes": _fn(
        "keepers length", RANDOM + "0bebee06dd3594204ef05e2a6219b801f4eebf47", "internal/provider/resource_bytes.go",
        note="plugin framework: RequiresReplace (keepers: RequiresReplaceIfValuesNotNull)"),
    "random:index/randomString:RandomString": _fn(
        "keepers length lower minLower minNumeric minSpecial minUpper number numeric overrideSpecial special upper",
        RANDOM + "01a15580020f2e7bb08c5834dcc6f895a941a2f7", "internal/provider/resource_string.go",
        note="3.x (tfsdk); RequiresReplace on every input attribute"),
    "pulumi:index:Stash": _fn(
        "", "pulumi/pulumi@01c4ec37f501a3eb579e0a092da0e63fc43cf03c", "pkg/resource/deploy/builtins.go",
        note="the engine's built-in: a new `input` is an update that keeps `output` (Diff: ChangedKeys input, no "
        "ReplaceKeys); only the resource option replacement_trigger (or --replace) makes a new one"),
    "command:local:Command": _fn(
        "triggers", COMMAND + "01a81799dca78b7a6f08639409e7c43fefba7ae2", "provider/pkg/provider/common/inputs.go",
        note="ResourceInputs.Triggers `provider:\"replaceOnChanges\"` (local/command.go's CommandArgs at 09c953e0 "
        "likewise); a new `create` runs it again in place (an update), not a replacement"),
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
