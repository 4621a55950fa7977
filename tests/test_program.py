"""The Pulumi program under mocks: every stack file, in preview and in update, wired as designed.

`conftest.run_program` runs the real `__main__.py`. Preview runs prove that unknown values (no
addresses, ids or keys yet) do not crash the program; update runs check the wiring against the
fake values the mocks returned and the rendered configs against the site components' keys.
"""

from __future__ import annotations

import base64
import copy
import gzip
import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pulumi.runtime import rpc

from tests.conftest import (
    STACK_FILES,
    ProgramRun,
    Recorded,
    run_program,
)
from wg_mesh.aws import facts as awsfacts
from wg_mesh.aws.facts import ami_architecture
from wg_mesh.aws.firewall import SG_DESCRIPTION_CHARS
from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.gcp.facts import image_family
from wg_mesh.plan import render, topology, wgkey
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_ROUTE = "aws:ec2/route:Route"
AWS_EIP = "aws:ec2/eip:Eip"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCP_ROUTE = "gcp:compute/route:Route"
GCP_ADDRESS = "gcp:compute/address:Address"
RANDOM_BYTES = "random:index/randomBytes:RandomBytes"
NETWORK_TYPES = (
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
)
GCP_MAX_LOGICAL_NAME = 63 - 8  # GCP resource names are at most 63 characters; Pulumi appends 8


def mesh_of(run: ProgramRun) -> MeshConfig:
    return load_mesh(run.raw)


def cloud_sites(cfg: MeshConfig) -> Iterator[AwsSite | GcpSite]:
    for site in cfg.sites:
        if isinstance(site, AwsSite | GcpSite):
            yield site


def peer_public_ips(run: ProgramRun, name: str) -> set[str]:
    return {f"{run.sites[peer].public_ip.value}/32" for peer in topology.peer_names(mesh_of(run), name)}


def parse_user_data(text: str) -> dict[str, Any]:
    assert text.startswith("#cloud-config\n")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def written_wg_conf(user_data: str) -> str:
    files = [f for f in parse_user_data(user_data)["write_files"] if f["path"] == render.WG_CONF_PATH]
    assert len(files) == 1
    assert files[0]["permissions"] == "0600"
    content = files[0]["content"]
    assert isinstance(content, str)
    return content


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def user_data_input(resource: Recorded) -> str:
    """The #cloud-config text an instance gets (AWS: gzip'd, base64 in userDataBase64)."""
    if resource.type == AWS_INSTANCE:
        assert "userData" not in resource.inputs
        packed = base64.b64decode(resource.inputs["userDataBase64"], validate=True)
        assert packed[:2] == b"\x1f\x8b"  # gzip: cloud-init uncompresses it
        return gzip.decompress(packed).decode()
    value = resource.inputs["metadata"]["user-data"]
    assert isinstance(value, str)
    return value


def instance_of(run: ProgramRun, site: AwsSite | GcpSite) -> Recorded:
    return run.vm(AWS_INSTANCE if isinstance(site, AwsSite) else GCP_INSTANCE, site.name)


# --- preview ---------------------------------------------------------------------------------


def test_preview_declares_every_site_with_unknown_addresses_and_keys(previewed: ProgramRun) -> None:
    cfg = mesh_of(previewed)
    assert set(previewed.sites) == {site.name for site in cfg.sites}
    for site in cfg.sites:
        values = previewed.sites[site.name]
        assert not values.public_key.known  # the RandomBytes does not exist yet
        assert not values.wg_config.known and values.wg_config.secret
        if cfg.delivery == "live" and getattr(site, "gateways", 1) > 1:
            # HA: agent.json's `ha` object names the site's address and route tables, unknown before they exist
            assert not values.user_data.secret
        elif cfg.delivery == "live":  # no peer, no key: public (test_program_live.py); it pins the mesh's signing
            # key, unknown in a new stack's preview like the sites' keys (known from the state in later previews)
            assert not values.user_data.known and not values.user_data.secret
        else:
            assert not values.user_data.known and values.user_data.secret
        assert values.private_key.secret
        assert values.public_ip.known == isinstance(site, StaticSite)
    for site in cloud_sites(cfg):
        instance = instance_of(previewed, site)
        secret_key = "userDataBase64" if isinstance(site, AwsSite) else "metadata"
        if cfg.delivery == "live":  # nothing secret in it: public
            assert secret_key not in instance.secret_inputs and secret_key in instance.inputs
            continue
        assert secret_key in instance.secret_inputs
        assert "user-data" not in json.dumps(instance.public_inputs(), default=str)
    assert previewed.exports["wireguard_configs"].secret
    assert previewed.exports["static_site_cloud_init"].secret
    assert previewed.exports["tunnel_mtu"].value == topology.tunnel_mtu(cfg)


def test_preview_and_update_declare_the_same_resources(previewed: ProgramRun) -> None:
    applied_run = run_program(previewed.raw, preview=False, stack=previewed.stack)
    assert applied_run.error is None
    names = sorted((r.type, r.name) for r in previewed.resources)
    assert names == sorted((r.type, r.name) for r in applied_run.resources)


# --- wiring ----------------------------------------------------------------------------------


def test_instances_have_the_configured_types_and_ubuntu_images(applied: ProgramRun) -> None:
    cfg = mesh_of(applied)
    ami_calls = [c for c in applied.mocks.calls if c.token == "aws:ec2/getAmi:getAmi" and "owners" in c.args]
    assert len(ami_calls) == sum(isinstance(s, AwsSite) for s in cfg.sites)
    for site in cloud_sites(cfg):
        instance = instance_of(applied, site)
        if isinstance(site, AwsSite):
            assert instance.inputs["instanceType"] == site.instance_type
            (call,) = [c for c in ami_calls if f"::{site.name}-provider::" in c.provider]
            assert call.args["owners"] == [awsfacts.canonical_owner(site.region)] == ["099720109477"]
            assert call.args["mostRecent"] is True
            filters = {f["name"]: f["values"] for f in call.args["filters"]}
            arch = ami_architecture(site.instance_type)
            assert filters["name"] == [f"ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-*"]
            assert instance.inputs["ami"].startswith("ami-")
        else:
            assert instance.inputs["machineType"] == site.instance_type
            assert instance.inputs["zone"] == site.zone
            assert instance.inputs["bootDisk"]["initializeParams"]["image"] == image_family(site.instance_type)


def test_wireguard_port_is_open_to_exactly_the_peers_public_addresses(applied: ProgramRun) -> None:
    cfg = mesh_of(applied)
    for site in cloud_sites(cfg):
        peers = peer_public_ips(applied, site.name)
        assert len(peers) == len(cfg.sites) - 1
        if isinstance(site, AwsSite):
            sg = applied.named(AWS_SG, f"{site.name}-sg")
            udp = [rule for rule in sg.inputs["ingress"] if rule["protocol"] == "udp"]
            assert len(udp) == 1
            assert udp[0]["fromPort"] == udp[0]["toPort"] == cfg.listen_port
            assert set(udp[0]["cidrBlocks"]) == peers
        else:
            fw = applied.named(GCP_FIREWALL, f"{site.name}-fw-wireguard")
            assert fw.inputs["allows"] == [{"protocol": "udp", "ports": [str(cfg.listen_port)]}]
            assert set(fw.inputs["sourceRanges"]) == peers
            assert fw.inputs["targetTags"] == instance_of(applied, site).inputs["tags"]


def test_public_addresses_are_the_allocated_ones(applied: ProgramRun) -> None:
    """A site's advertised address is its Elastic IP / static address, which exists before its instance."""
    order = [(r.type, r.name) for r in applied.resources]
    for site in cloud_sites(mesh_of(applied)):
        if isinstance(site, AwsSite):
            address = applied.named(AWS_EIP, f"{site.name}-eip")
            assert address.inputs["domain"] == "vpc"
            assert applied.sites[site.name].public_ip.value == address.outputs["publicIp"]
        else:
            address = applied.named(GCP_ADDRESS, f"{site.name}-address")
            assert address.inputs["addressType"] == "EXTERNAL"
            assert applied.sites[site.name].public_ip.value == address.outputs["address"]
            nic = instance_of(applied, site).inputs["networkInterfaces"][0]
            # Booted with an ephemeral address; the readiness gate moves the static one to it (tests/test_gcp_gate.py).
            assert nic["accessConfigs"] == [{}]
        instance = instance_of(applied, site)
        assert order.index((address.type, address.name)) < order.index((instance.type, instance.name))


def test_nothing_is_open_to_the_world_and_nothing_opens_ssh(applied: ProgramRun) -> None:
    """Every ingress source is a peer's /32 or a range of the mesh (site CIDRs, overlay)."""
    cfg = mesh_of(applied)
    mesh_ranges = [cfg.overlay_cidr, *(cidr for site in cfg.sites for cidr in site.cidrs)]
    peer_addresses = {f"{values.public_ip.value}/32" for values in applied.sites.values()}
    # ...and a GCP gateway's own internal address (the source of its path-MTU ICMP).
    peer_addresses |= {f"{i.outputs['networkInterfaces'][0]['networkIp']}/32" for i in applied.of_type(GCP_INSTANCE)}
    # ...and Google's health-check probers, to the agent's /healthz port only (gateways: 2, test_program_ha_gcp.py).
    probers = {"35.191.0.0/16", "130.211.0.0/22"}

    def allowed(source: str) -> bool:
        network = ipaddress.IPv4Network(source)
        return source in peer_addresses or any(network.subnet_of(r) for r in mesh_ranges)

    rules = 0
    for sg in applied.of_type(AWS_SG):
        for rule in sg.inputs["ingress"]:
            rules += 1
            assert all(allowed(c) for c in rule["cidrBlocks"]), rule
            assert not rule.get("ipv6CidrBlocks")
            assert not (rule["protocol"] in ("tcp", "6") and rule["fromPort"] <= 22 <= rule["toPort"]), rule
    for fw in applied.of_type(GCP_FIREWALL):
        rules += 1
        assert fw.inputs["direction"] == "INGRESS"
        if set(fw.inputs["sourceRanges"]) == probers:
            assert fw.inputs["allows"] == [{"protocol": "tcp", "ports": ["9181"]}], fw.name
            continue
        assert all(allowed(c) for c in fw.inputs["sourceRanges"]), fw.name
        for allow in fw.inputs["allows"]:
            assert not (allow["protocol"] == "tcp" and "22" in allow.get("ports", [])), fw.name
    # GCP: WireGuard, forward, remote (the stack files choose a workload scope), path-MTU ICMP from the gateway.
    assert rules == 2 * sum(isinstance(s, AwsSite) for s in cfg.sites) + 4 * sum(
        isinstance(s, GcpSite) for s in cfg.sites
    ) + sum(isinstance(s, GcpSite) and s.gateways > 1 for s in cfg.sites) + sum(  # GCP HA: the probers' rule
        isinstance(s, AwsSite) and s.gateways > 1 and not s.uses_existing_network for s in cfg.sites
    )  # AWS HA in a created VPC: HTTPS to the EC2 interface endpoint from the gateway subnets (aws.ha.ec2_endpoint)


def test_gateways_forward_and_are_hardened(applied: ProgramRun) -> None:
    for site in cloud_sites(mesh_of(applied)):
        inputs = instance_of(applied, site).inputs
        if isinstance(site, AwsSite):
            assert inputs["sourceDestCheck"] is False
            assert inputs["metadataOptions"]["httpTokens"] == "required"
            assert inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
            assert inputs["rootBlockDevice"]["encrypted"] is True
            assert inputs["userDataReplaceOnChange"] is True
            assert inputs["associatePublicIpAddress"] is True
            assert inputs["tags"]["Name"] == f"wg-mesh-{site.name}"
        else:
            assert inputs["canIpForward"] is True
            assert inputs["shieldedInstanceConfig"] == {
                "enableSecureBoot": True,
                "enableVtpm": True,
                "enableIntegrityMonitoring": True,
            }
            assert inputs["allowStoppingForUpdate"] is True


def test_security_groups_admit_the_sites_own_traffic_and_keep_egress(applied: ProgramRun) -> None:
    for site in mesh_of(applied).sites:
        if not isinstance(site, AwsSite):
            continue
        sg = applied.named(AWS_SG, f"{site.name}-sg")
        forward = [rule for rule in sg.inputs["ingress"] if rule["protocol"] == "-1"]
        assert [set(rule["cidrBlocks"]) for rule in forward] == [{str(c) for c in site.cidrs}]
        assert sg.inputs["egress"] == [{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}]
        assert instance_of(applied, site).inputs["vpcSecurityGroupIds"] == [sg.id]
        descriptions = [sg.inputs["description"], *(rule["description"] for rule in sg.inputs["ingress"])]
        assert all(SG_DESCRIPTION_CHARS.fullmatch(d) for d in descriptions), descriptions


def test_routes_send_every_remote_range_to_the_gateway(applied: ProgramRun) -> None:
    cfg = mesh_of(applied)
    for site in cloud_sites(cfg):
        remote = [str(r) for r in topology.remote_ranges(cfg, site.name)]
        assert str(cfg.overlay_cidr) in remote
        if isinstance(site, AwsSite):
            eni = instance_of(applied, site).outputs["primaryNetworkInterfaceId"]
            (table,) = [r for r in applied.of_type("aws:ec2/routeTable:RouteTable") if r.name.startswith(site.name)]
            table_id = table.id
            routes = [r for r in applied.of_type(AWS_ROUTE) if r.name.startswith(f"{site.name}-route-")]
            assert sorted(r.inputs["destinationCidrBlock"] for r in routes) == sorted(remote)
            for route in routes:
                assert route.inputs["networkInterfaceId"] == eni
                assert route.inputs["routeTableId"] == table_id
                assert route.name == f"{site.name}-route-0-" + route.inputs["destinationCidrBlock"].replace(
                    ".", "-"
                ).replace("/", "-")
            (default,) = [r for r in applied.of_type(AWS_ROUTE) if r.name == f"{site.name}-rt-default"]
            assert default.inputs["destinationCidrBlock"] == "0.0.0.0/0"
            assert default.inputs["gatewayId"].startswith("igw-")
        else:
            self_link = instance_of(applied, site).outputs["selfLink"]
            network = applied.named("gcp:compute/network:Network", f"{site.name}-network").outputs["selfLink"]
            routes = [r for r in applied.of_type(GCP_ROUTE) if r.name.startswith(f"{site.name}-")]
            assert sorted(r.inputs["destRange"] for r in routes) == sorted(remote)
            if site.gateways > 1:  # the load balancer's forwarding rule (tests/test_program_ha_gcp.py)
                self_link = applied.named("gcp:compute/forwardingRule:ForwardingRule", f"{site.name}-fr").outputs[
                    "selfLink"
                ]
            for route in routes:
                assert route.inputs.get("nextHopInstance", route.inputs.get("nextHopIlb")) == self_link
                assert route.inputs["network"] == network
                assert route.inputs["priority"] == 900


def test_created_networks_have_the_site_ranges_and_mtu(applied: ProgramRun) -> None:
    for site in cloud_sites(mesh_of(applied)):
        gateway_subnet = str(topology.gateway_subnet(site.cidrs[0]))
        if isinstance(site, AwsSite):
            vpc = applied.named("aws:ec2/vpc:Vpc", f"{site.name}-vpc")
            assert vpc.inputs["cidrBlock"] == str(site.cidrs[0])
            assert vpc.inputs["enableDnsSupport"] is True and vpc.inputs["enableDnsHostnames"] is True
            subnet = applied.named("aws:ec2/subnet:Subnet", f"{site.name}-subnet")
            assert subnet.inputs["cidrBlock"] == gateway_subnet
            assert instance_of(applied, site).inputs["subnetId"] == subnet.id
        else:
            network = applied.named("gcp:compute/network:Network", f"{site.name}-network")
            assert network.inputs["mtu"] == site.underlay_mtu
            assert network.inputs["autoCreateSubnetworks"] is False
            subnet = applied.named("gcp:compute/subnetwork:Subnetwork", f"{site.name}-subnet")
            assert subnet.inputs["ipCidrRange"] == gateway_subnet
            assert subnet.inputs["region"] == site.region
            nic = instance_of(applied, site).inputs["networkInterfaces"][0]
            assert nic["subnetwork"] == subnet.outputs["selfLink"]


def test_cloud_resources_use_their_sites_provider_and_sit_under_the_mesh(applied: ProgramRun) -> None:
    cfg = mesh_of(applied)
    for resource in applied.resources:
        cloud = resource.type.split(":", 1)[0]
        if cloud in ("aws", "gcp"):
            owners = [s.name for s in cfg.sites if resource.name.startswith(f"{s.name}-")]
            assert owners, resource.name
            assert f"pulumi:providers:{cloud}::{owners[0]}-provider::" in resource.provider, resource.name
    for urn in applied.monitor.resources:
        parent_type = urn.split("::")[2].split("$")[0]
        resource_type = urn.split("::")[2].split("$")[-1]
        assert parent_type.startswith("wg-mesh:") or resource_type == "wg-mesh:index:Mesh", urn


def test_user_data_is_cloud_config_with_the_rendered_wg_conf(applied_user_data: ProgramRun) -> None:
    applied = applied_user_data  # delivery: live: tests/test_program_live.py
    cfg = mesh_of(applied)
    mtu = topology.tunnel_mtu(cfg)
    configs = applied.exports["wireguard_configs"].value
    static_cloud_init = applied.exports["static_site_cloud_init"].value
    assert set(configs) == {site.name for site in cfg.sites}
    assert set(static_cloud_init) == {site.name for site in cfg.sites if isinstance(site, StaticSite)}

    for site in cfg.sites:
        values = applied.sites[site.name]
        if isinstance(site, StaticSite):
            user_data = static_cloud_init[site.name]
        else:
            user_data = user_data_input(instance_of(applied, site))
        assert user_data == values.user_data.value
        document = parse_user_data(user_data)
        assert "wireguard-tools" in document["packages"]
        conf = written_wg_conf(user_data)
        assert conf == values.wg_config.value == configs[site.name]

        sections = render.parse_wg_quick_conf(conf)
        interface = [body for name, body in sections if name == "Interface"]
        assert len(interface) == 1
        assert interface[0]["Address"] == [f"{site.overlay_ip}/{cfg.overlay_cidr.prefixlen}"]
        assert interface[0]["ListenPort"] == [str(cfg.listen_port)]
        assert interface[0]["MTU"] == [str(mtu)]
        assert interface[0]["PrivateKey"] == [values.private_key.value]
        assert wgkey.public_key(values.private_key.value) == values.public_key.value

        peers = {body["PublicKey"][0]: body for name, body in sections if name == "Peer"}
        expected = topology.peer_names(cfg, site.name)
        assert set(peers) == {applied.sites[peer].public_key.value for peer in expected}
        assert len(peers) == len(expected)
        for peer in expected:
            body = peers[applied.sites[peer].public_key.value]
            assert body["AllowedIPs"] == [", ".join(topology.allowed_ips(cfg, peer))]
            assert body["Endpoint"] == [f"{applied.sites[peer].public_ip.value}:{cfg.listen_port}"]
            assert body["PersistentKeepalive"] == [str(cfg.persistent_keepalive)]


def test_stack_outputs_describe_every_site(applied: ProgramRun) -> None:
    cfg = mesh_of(applied)
    sites = applied.exports["sites"]
    assert sites.known and not sites.secret
    assert set(sites.value) == {site.name for site in cfg.sites}
    for site in cfg.sites:
        values = applied.sites[site.name]
        assert sites.value[site.name] == {
            "cloud": site.cloud,
            "public_ip": values.public_ip.value,
            "overlay_ip": str(site.overlay_ip),
            "public_key": values.public_key.value,
            "cidrs": [str(c) for c in site.cidrs],
        }
    assert applied.exports["tunnel_mtu"].value == topology.tunnel_mtu(cfg)
    assert not applied.exports["tunnel_mtu"].secret


# --- secrets ---------------------------------------------------------------------------------


def test_everything_holding_a_private_key_is_secret(applied_user_data: ProgramRun) -> None:
    applied = applied_user_data  # delivery: live: tests/test_program_live.py
    for name, values in applied.sites.items():
        assert values.private_key.secret, name
        assert values.wg_config.secret, name
        assert values.user_data.secret, name
        assert not values.public_key.secret, name
        assert not values.public_ip.secret, name
    assert applied.exports["wireguard_configs"].secret
    assert applied.exports["static_site_cloud_init"].secret
    for instance in applied.of_type(AWS_INSTANCE):
        assert "userDataBase64" in instance.secret_inputs
    for instance in applied.of_type(GCP_INSTANCE):
        assert "metadata" in instance.secret_inputs


def test_no_private_key_appears_anywhere_public(applied: ProgramRun) -> None:
    """Scan every non-secret resource input, component output and stack output for key material."""
    key_material = applied.private_keys() + [r.outputs["base64"] for r in applied.of_type(RANDOM_BYTES)]
    # every site's key twice (its RandomBytes and the clamped key) and, delivery: live, the mesh's signing seed
    signing = [applied.signing_seed.value] if applied.signing_seed is not None else []
    assert len(key_material) == 2 * len(applied.sites) + len(signing) and set(signing) <= set(key_material)

    public: list[tuple[str, Any]] = [(f"{r.type} {r.name}", r.public_inputs()) for r in applied.resources]
    for urn, outputs in applied.monitor.component_outputs.items():
        public += [(f"{urn} {k}", v) for k, v in outputs.items() if not rpc.is_rpc_secret(v)]
    public += [(f"stack output {k}", v.value) for k, v in applied.exports.items() if not v.secret]
    public += [(f"{name}.public_key", v.public_key.value) for name, v in applied.sites.items()]
    assert len(public) > len(applied.resources)

    for where, value in public:
        for text in strings_in(value):
            assert not any(key in text for key in key_material), f"key material in {where}"


# --- config errors, key rotation, existing networks ------------------------------------------


def dev_raw() -> dict[str, Any]:
    raw = read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.dev.yaml"))
    assert isinstance(raw, dict)
    return copy.deepcopy(raw)


def site_raw(raw: dict[str, Any], cloud: str) -> dict[str, Any]:
    (site,) = [s for s in raw["sites"] if s["cloud"] == cloud]
    assert isinstance(site, dict)
    return site


def test_invalid_config_is_a_run_error_naming_each_field_before_any_resource() -> None:
    raw = dev_raw()
    raw["listen_port"] = 0
    site_raw(raw, "gcp")["overlay_ip"] = "10.201.0.2"
    run = run_program(raw, preview=True)
    assert run.error is not None
    message = str(run.error)
    assert "sites[1].overlay_ip: 10.201.0.2 is outside overlay_cidr 10.200.0.0/24" in message
    assert "listen_port:" in message
    assert "Traceback" not in message
    assert run.resources == []
    assert run.mocks.calls == []


def keepers(run: ProgramRun) -> dict[str, Any]:
    return {r.name: r.inputs["keepers"] for r in run.of_type(RANDOM_BYTES)}


def test_same_config_gives_identical_inputs_and_keys() -> None:
    first, second = run_program(dev_raw(), preview=False), run_program(dev_raw(), preview=False)
    assert (
        keepers(first)
        == keepers(second)
        == {"aws-use1-key-random": {"key_epoch": "0"}, "gcp-euw3-key-random": {"key_epoch": "0"}}
    )
    assert {(r.type, r.name): r.inputs for r in first.resources} == {
        (r.type, r.name): r.inputs for r in second.resources
    }
    assert {n: s.public_key.value for n, s in first.sites.items()} == {
        n: s.public_key.value for n, s in second.sites.items()
    }


def test_bumping_key_epoch_rotates_only_that_sites_key() -> None:
    before = run_program(dev_raw(), preview=False)
    raw = dev_raw()
    site_raw(raw, "gcp")["key_epoch"] = 1
    after = run_program(raw, preview=False)
    assert keepers(after) == {**keepers(before), "gcp-euw3-key-random": {"key_epoch": "1"}}
    assert after.sites["aws-use1"].public_key == before.sites["aws-use1"].public_key
    assert after.sites["gcp-euw3"].public_key != before.sites["gcp-euw3"].public_key
    # The peer learns the new key through its own config.
    aws_conf = after.sites["aws-use1"].wg_config.value
    assert f"PublicKey = {after.sites['gcp-euw3'].public_key.value}" in aws_conf


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "update"])
def test_existing_networks_are_used_not_created(preview: bool) -> None:
    raw = dev_raw()
    tables = ["rtb-0aaaaaaaaaaaaaaa1", "rtb-0aaaaaaaaaaaaaaa2"]
    site_raw(raw, "aws").update(
        vpc_id="vpc-0123456789abcdef0", subnet_id="subnet-0123456789abcdef0", route_table_ids=tables
    )
    site_raw(raw, "gcp").update(network="prod-vpc", subnetwork="prod-euw3")
    run = run_program(raw, preview=preview)
    assert run.error is None
    assert not [r for r in run.resources if r.type in NETWORK_TYPES]
    assert not [r for r in run.of_type(AWS_ROUTE) if r.name.endswith("-rt-default")]
    cfg = mesh_of(run)

    aws_remote = [str(r) for r in topology.remote_ranges(cfg, "aws-use1")]
    routes = run.of_type(AWS_ROUTE)
    assert sorted((r.inputs["routeTableId"], r.inputs["destinationCidrBlock"]) for r in routes) == sorted(
        (table, cidr) for table in tables for cidr in aws_remote
    )
    assert len({r.name for r in routes}) == len(tables) * len(aws_remote)
    assert run.named(AWS_SG, "aws-use1-sg").inputs["vpcId"] == "vpc-0123456789abcdef0"
    assert run.named(AWS_INSTANCE, "aws-use1-instance").inputs["subnetId"] == "subnet-0123456789abcdef0"

    gcp_remote = [str(r) for r in topology.remote_ranges(cfg, "gcp-euw3")]
    assert sorted(r.inputs["destRange"] for r in run.of_type(GCP_ROUTE)) == sorted(gcp_remote)
    assert {r.inputs["network"] for r in run.of_type(GCP_ROUTE)} == {"prod-vpc"}
    assert {r.inputs["network"] for r in run.of_type(GCP_FIREWALL)} == {"prod-vpc"}
    nic = run.named(GCP_INSTANCE, "gcp-euw3-instance").inputs["networkInterfaces"][0]
    assert (nic["network"], nic["subnetwork"]) == ("prod-vpc", "prod-euw3")
    if not preview:
        eni = run.named(AWS_INSTANCE, "aws-use1-instance").outputs["primaryNetworkInterfaceId"]
        assert {r.inputs["networkInterfaceId"] for r in routes} == {eni}


def test_extra_aws_cidrs_are_associated_and_graviton_gets_an_arm_image() -> None:
    raw = dev_raw()
    site_raw(raw, "aws").update(cidrs=["10.10.0.0/16", "10.11.0.0/16"], instance_type="c7gn.2xlarge")
    run = run_program(raw, preview=False)
    assert run.error is None
    (association,) = run.of_type("aws:ec2/vpcIpv4CidrBlockAssociation:VpcIpv4CidrBlockAssociation")
    assert association.inputs["cidrBlock"] == "10.11.0.0/16"
    (call,) = [c for c in run.mocks.calls if c.token == "aws:ec2/getAmi:getAmi" and "owners" in c.args]
    assert "-arm64-server-" in call.args["filters"][0]["values"][0]
    gcp_fw = run.named(GCP_FIREWALL, "gcp-euw3-fw-remote")
    assert set(gcp_fw.inputs["sourceRanges"]) == {"10.200.0.0/24", "10.10.0.0/16", "10.11.0.0/16"}


def test_gcp_names_fit_with_the_longest_site_name() -> None:
    raw = dev_raw()
    long_name = "g" * 32
    site_raw(raw, "gcp")["name"] = long_name
    # the longest slug of a block AWS lets a 10/8 VPC add (not 172.31.255.240/28: another RFC 1918 range)
    site_raw(raw, "aws")["cidrs"] = ["10.10.0.0/16", "10.255.255.240/28"]
    run = run_program(raw, preview=True)
    assert run.error is None
    gcp_names = [r.name for r in run.resources if r.type.startswith("gcp:compute/")]
    assert any(name.startswith(f"{long_name}-to-10-255-255-240-28") for name in gcp_names)
    assert max(len(name) for name in gcp_names) <= GCP_MAX_LOGICAL_NAME


@pytest.mark.parametrize(
    ("instance_type", "arch"),
    [
        ("c6i.2xlarge", "amd64"),
        ("c7g.large", "arm64"),
        ("m7gd.xlarge", "arm64"),
        ("c6gn.16xlarge", "arm64"),
        ("t4g.micro", "arm64"),
        ("is4gen.large", "arm64"),
        ("g4dn.xlarge", "amd64"),
        ("g5.xlarge", "amd64"),
        ("m7i-flex.large", "amd64"),
        ("a1.large", "arm64"),  # Graviton 1: no 'g' in the family name
        ("a1.metal", "arm64"),
        ("hpc7g.16xlarge", "arm64"),
    ],
)
def test_ami_architecture(instance_type: str, arch: str) -> None:
    assert ami_architecture(instance_type) == arch


def test_gce_image_family() -> None:
    assert image_family("n2-standard-8") == "ubuntu-os-cloud/ubuntu-2404-lts-amd64"
    assert image_family("c4a-standard-8") == "ubuntu-os-cloud/ubuntu-2404-lts-arm64"
    assert image_family("t2a-standard-4") == "ubuntu-os-cloud/ubuntu-2404-lts-arm64"
