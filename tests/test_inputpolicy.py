"""The INPUT policy's renderer (pure): what each gateway admits, and that the user data ships it first.
The same rules on a real kernel: tests/test_inputpolicy_netns.py."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml

from wg_mesh.config import MeshConfig
from wg_mesh.gcp import ha as gcp_ha
from wg_mesh.gcp.firewall import IAP_TCP_FORWARDING_RANGE
from wg_mesh.plan import inputpolicy, live, userdata
from wg_mesh.plan.inputpolicy import Admit
from wg_mesh.plan.validate import load_mesh

REPO = Path(__file__).resolve().parent.parent


def raw(stack: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]["wg-mesh:mesh"]
    return data


def mesh(stack: str, **changes: Any) -> MeshConfig:
    return load_mesh({**raw(stack), **changes})


def accepts(text: str, port: int) -> list[str]:
    return [line for line in text.splitlines() if f"--dport {port} " in line and line.endswith("-j ACCEPT")]


def test_cloud_gateways_are_closed_and_admit_only_their_sources() -> None:
    cfg = mesh("ha", monitoring_cidrs=["192.0.2.0/24"])
    aws, gce = (inputpolicy.render(inputpolicy.policy_for(cfg, name)) for name in ("aws-use1", "gcp-euw3"))
    for text in (aws, gce):
        assert text.splitlines()[-2:] == ["-A WGMESH-INPUT -j DROP", "COMMIT"]
        assert accepts(text, 51820) == ["-A WGMESH-INPUT ! -i wg0 -p udp -m udp --dport 51820 -j ACCEPT"]
        # node-exporter from monitoring_cidrs only, through the tunnel too (a Prometheus in another site)
        assert accepts(text, 9100) == ["-A WGMESH-INPUT -s 192.0.2.0/24 -p tcp -m tcp --dport 9100 --syn -j ACCEPT"]
        # every admitted port names its sources and never the tunnel, but node-exporter's and WireGuard's
        for port in (22, 9181):
            assert all(" -s " in line and "! -i wg0" in line for line in accepts(text, port))
    assert {line.split(" -s ")[1].split()[0] for line in accepts(aws, 9181)} == {"10.10.0.0/24", "10.10.1.0/24"}
    assert {line.split(" -s ")[1].split()[0] for line in accepts(gce, 9181)} == {
        "10.100.0.0/24",
        *gcp_ha.PROBER_RANGES,
    }
    assert accepts(aws, 22) == []  # Session Manager needs no inbound port
    assert [line.split(" -s ")[1].split()[0] for line in accepts(gce, 22)] == [IAP_TCP_FORWARDING_RANGE]


def test_a_single_gateway_serves_no_healthz_and_without_monitoring_cidrs_no_exporter() -> None:
    text = inputpolicy.render(inputpolicy.policy_for(mesh("dev"), "aws-use1"))
    assert accepts(text, 9181) == [] and accepts(text, 9100) == []


def test_a_static_site_polices_the_tunnel_only() -> None:
    cfg = mesh("prod", monitoring_cidrs=["192.0.2.0/24"])
    policy = inputpolicy.policy_for(cfg, "vps-fra")
    text = inputpolicy.render(policy)
    lines = text.splitlines()
    assert not policy.closed and lines.index("-A WGMESH-INPUT ! -i wg0 -j RETURN") < lines.index(
        "-A WGMESH-INPUT -j DROP"
    )
    assert accepts(text, 51820) == []  # its host filter is wg-quick's (wgconf.forwarding_rules, listen_sources)
    assert accepts(text, 22) == [] and len(accepts(text, 9100)) == 1
    assert inputpolicy.render6(policy).splitlines()[-2:] == ["-A WGMESH-INPUT -j RETURN", "COMMIT"]


def test_icmp_for_path_mtu_and_the_probes_and_dhcp_are_admitted() -> None:
    text = inputpolicy.render(inputpolicy.policy_for(mesh("dev"), "gcp-euw3"))
    for kind in ("destination-unreachable", "echo-request", "time-exceeded"):
        assert f"-A WGMESH-INPUT -p icmp -m icmp --icmp-type {kind} -j ACCEPT" in text
    assert "-A WGMESH-INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT" in text
    assert "-A WGMESH-INPUT ! -i wg0 -p udp -m udp --sport 67 --dport 68 -j ACCEPT" in text
    six = inputpolicy.render6(inputpolicy.policy_for(mesh("dev"), "gcp-euw3"))
    assert "-p ipv6-icmp -j ACCEPT" in six and six.splitlines()[-2] == "-A WGMESH-INPUT -j DROP"


def test_the_policy_depends_on_no_peer_and_not_on_operator_access() -> None:
    """The live user data must not change when the mesh does (nothing replaces a gateway), and toggling
    operator_access is in place on both clouds (its VPC rule and role are the switch)."""
    base = raw("prod")
    more = {**base, "sites": [*base["sites"], {**base["sites"][-1], "name": "vps-ams", "overlay_ip": "10.200.0.99",
                                                "cidrs": ["192.168.77.0/24"], "endpoint": "203.0.113.99"}]}  # fmt: skip
    for changed in (more, {**base, "operator_access": "cloud"}):
        for name in ("aws-use1", "gcp-euw3"):
            assert inputpolicy.policy_for(load_mesh(changed), name) == inputpolicy.policy_for(load_mesh(base), name)


def test_the_clouds_ranges_are_the_ones_their_vpc_rules_use() -> None:
    assert [str(n) for n in inputpolicy.GCP_PROBERS] == gcp_ha.PROBER_RANGES
    assert str(inputpolicy.IAP_TCP_FORWARDING) == IAP_TCP_FORWARDING_RANGE


@pytest.mark.parametrize(
    ("field", "value"),
    [("protocol", "sctp"), ("port", 0), ("port", 65536), ("what", "two\nlines"), ("sources", ("10.0.0.0/8",))],
)
def test_an_admission_is_typed(field: str, value: Any) -> None:
    args: dict[str, Any] = {"what": "x", "protocol": "tcp", "port": 22, "sources": (IPv4Network("10.0.0.0/8"),)}
    with pytest.raises(ValueError, match=field):
        Admit(**{**args, field: value})


@pytest.mark.parametrize("stack", ["dev", "prod", "ha"])
def test_every_user_data_loads_the_policy_before_wg0_and_the_agent(stack: str) -> None:
    cfg = mesh(stack)
    for site in cfg.sites:
        if cfg.delivery == "live":
            trust = userdata.estimate_trust(cfg, site, "p", "s")
            text = userdata.render_live_user_data(cfg, site.name, live.agent_source(site, "p", "s"), trust=trust)
        else:
            text = userdata.render_user_data(cfg, site.name, "(wg0.conf)", userdata.worst_case_directory(cfg))
        doc = yaml.safe_load(text)
        files = {f["path"]: f for f in doc["write_files"]}
        policy = inputpolicy.policy_for(cfg, site.name)
        assert files[inputpolicy.RULES_PATH]["content"] == inputpolicy.render(policy)
        assert files[inputpolicy.RULES_PATH]["permissions"] == "0600"
        assert files[inputpolicy.RULES6_PATH]["content"] == inputpolicy.render6(policy)
        assert files[inputpolicy.UNIT_PATH]["content"] == inputpolicy.unit_text()
        runcmd = [" ".join(c) if isinstance(c, list) else c for c in doc["runcmd"]]
        start = runcmd.index(f"systemctl enable --now {inputpolicy.UNIT_NAME}")
        later = [i for i, c in enumerate(runcmd) if "wg-quick@" in c or "wgmesh_gateway" in c]
        assert later and start < min(later), site.name
        assert inputpolicy.UNIT_NAME in runcmd[-1]  # checked active at the end: `cloud-init status` fails without it


def test_the_unit_loads_before_any_network_and_hooks_the_chain_once() -> None:
    unit = inputpolicy.unit_text()
    assert "Before=network-pre.target" in unit and "Wants=network-pre.target" in unit
    assert "DefaultDependencies=no" in unit and "Type=oneshot" in unit and "RemainAfterExit=yes" in unit
    assert f"--noflush {inputpolicy.RULES_PATH}" in unit and f"--noflush {inputpolicy.RULES6_PATH}" in unit
    assert "-C INPUT -j WGMESH-INPUT 2>/dev/null || /usr/sbin/iptables -w -I INPUT 1 -j WGMESH-INPUT" in unit
