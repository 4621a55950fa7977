"""A single-host static site: a bare-metal server with nothing behind it, reached at its overlay address (issue 23).

Pure: the config, the peers' AllowedIPs, what the other sites route and admit, wg0.conf and user data of both
delivery modes (a host's: no forwarding), the agent's trust and what it applies, the route quotas, the lab's plan."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agent_fake import sign
from tests.test_config import base, problems_for, with_change
from tests.test_gateway_document import trust_of
from tests.test_render import directory, fake_public_key, rendered
from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.config.quotas import aws_routes_per_table
from wg_mesh.gateway import hostplan
from wg_mesh.gateway.document import DocumentError, decode, encode_body
from wg_mesh.gateway.trust import parse_trust
from wg_mesh.lab.fabric.plan import plan_lab
from wg_mesh.plan import inputpolicy, live, render, topology, userdata
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools import monitoring

VPS = 2  # base()'s static site, vps-fra at 10.200.0.3


def single_host(cidrs: Any = None) -> MeshConfig:
    """base() with vps-fra's cidrs removed (None) or set."""
    return load_mesh(with_change(f"sites.{VPS}.cidrs", cidrs))


@pytest.mark.parametrize("cidrs", [None, []], ids=["cidrs-absent", "cidrs-empty"])
def test_a_static_site_may_have_no_cidrs(cidrs: Any) -> None:
    site = single_host(cidrs).site("vps-fra")
    assert isinstance(site, StaticSite) and site.cidrs == []


@pytest.mark.parametrize(("index", "cidrs"), [(0, []), (0, None), (1, []), (1, None)])
def test_a_cloud_site_still_needs_its_network(index: int, cidrs: Any) -> None:
    problems = problems_for(with_change(f"sites.{index}.cidrs", cidrs))
    assert [p for p in problems if p.startswith(f"sites[{index}].cidrs:")], problems


def test_its_peers_accept_and_route_only_its_overlay_address() -> None:
    cfg = single_host()
    assert topology.allowed_ips(cfg, "vps-fra") == ("10.200.0.3/32",)
    for other in ("aws-use1", "gcp-euw3"):
        block = rendered(cfg, other).split("# vps-fra\n", 1)[1]
        assert block.splitlines()[2] == "AllowedIPs = 10.200.0.3/32"


def test_the_other_sites_route_and_admit_nothing_for_it() -> None:
    with_lan, cfg = load_mesh(base()), single_host()
    # what the route tables send to the gateway and the workload firewalls admit: the overlay covers the host
    assert topology.remote_ranges(cfg, "aws-use1") == [cfg.overlay_cidr, *cfg.site("gcp-euw3").cidrs]
    assert topology.remote_ranges(cfg, "gcp-euw3") == [cfg.overlay_cidr, *cfg.site("aws-use1").cidrs]
    assert aws_routes_per_table(cfg, "aws-use1")[0] == aws_routes_per_table(with_lan, "aws-use1")[0] - 1


def test_its_own_config_and_user_data_render() -> None:
    cfg = single_host()
    conf = rendered(cfg, "vps-fra")
    assert "Address = 10.200.0.3/24" in conf and "AllowedIPs = 10.200.0.1/32, 10.10.0.0/16" in conf
    for site in cfg.sites:
        userdata.render_user_data(cfg, site.name, rendered(cfg, site.name), directory(cfg))
        userdata.render_live_user_data(
            cfg, site.name, live.agent_source(site, "wg-mesh", "s"), trust=userdata.estimate_trust(cfg, site)
        )


def test_the_agent_trusts_a_site_with_no_ranges_of_its_own() -> None:
    cfg = single_host()
    trust = live.trust(cfg, cfg.site("vps-fra"), "wg-mesh", "s", "A" * 43 + "=")
    assert trust["cidrs"] == []
    assert parse_trust(trust).cidrs == ()


def test_the_lab_lays_it_out_as_a_host_with_no_lan() -> None:
    plan = plan_lab(single_host(), "wgl0c0c")
    host = plan.site("vps-fra")
    assert host.single_host and host.host_ns == host.gateway_ns == "wgl0c0c-gw-vps-fra"
    assert str(host.host_ip) == "10.200.0.3/32" and host.host_routes == ()  # the checks ping its overlay address
    assert "wgl0c0c-host-vps-fra" not in plan.namespaces and len(set(plan.namespaces)) == len(plan.namespaces)
    assert not any(s.single_host for s in plan.sites if s is not host)


# What makes a gateway a router, in its wg0.conf: none of it may be in a single host's.
FORWARDING = ("ip_forward", "send_redirects", "rp_filter", "FORWARD", "TCPMSS", "MASQUERADE")


def lines_with(text: str, words: tuple[str, ...]) -> list[str]:
    return [line for line in text.splitlines() if any(word in line for word in words)]


@pytest.mark.parametrize("masquerade", [False, True], ids=["plain", "mesh-wide-masquerade"])
def test_its_wg0_conf_is_a_hosts_and_the_others_stay_routers(masquerade: bool) -> None:
    raw = with_change(f"sites.{VPS}.cidrs", None)
    cfg = load_mesh({**raw, "masquerade": masquerade})
    conf = rendered(cfg, "vps-fra")
    assert lines_with(conf, FORWARDING) == []
    assert not topology.forwards(cfg, "vps-fra") and not cfg.masquerades(cfg.site("vps-fra"))
    # what guards the host itself stays: nothing from the tunnel to link-local, the WireGuard port for peers only
    assert "PostUp = iptables -t raw -I PREROUTING -i %i -d 169.254.0.0/16 -j DROP" in conf
    assert "PostUp = iptables -t filter -I INPUT -p udp --dport 51820 -j DROP" in conf
    for other in ("aws-use1", "gcp-euw3"):  # the sites with networks behind them still forward (and masquerade)
        other_conf = rendered(cfg, other)
        assert "PostUp = sysctl -q -w net.ipv4.ip_forward=1" in other_conf
        assert "PostUp = iptables -t filter -I FORWARD -i %i -j ACCEPT" in other_conf
        assert ("MASQUERADE" in other_conf) is masquerade


def test_its_user_data_sets_no_sysctl_in_either_delivery_mode() -> None:
    cfg = single_host()
    plain = userdata.render_user_data(cfg, "vps-fra", rendered(cfg, "vps-fra"), directory(cfg))
    site = cfg.site("vps-fra")
    live_data = userdata.render_live_user_data(
        cfg, "vps-fra", live.agent_source(site, "wg-mesh", "s"), trust=userdata.estimate_trust(cfg, site)
    )
    assert "ip_forward" not in plain  # the live user data ships the agent, whose source names it
    routed = yaml.safe_load(userdata.render_user_data(cfg, "aws-use1", rendered(cfg, "aws-use1"), directory(cfg)))
    assert ["sysctl", "-p", render.SYSCTL_PATH] in routed["runcmd"]
    assert render.SYSCTL_PATH in [f["path"] for f in routed["write_files"]]
    for text in (plain, live_data):
        doc = yaml.safe_load(text)
        assert render.SYSCTL_PATH not in [f["path"] for f in doc["write_files"]]
        assert all("sysctl" not in str(cmd) for cmd in doc["runcmd"])


def host_document(cfg: MeshConfig, masquerade: bool = False) -> str:
    addresses = {s.name: topology.PeerAddress(f"198.51.100.{i + 1}", fake_public_key(s.name)) for i, s in
                 enumerate(cfg.sites)}  # fmt: skip
    plan = topology.interface_plan(cfg, "vps-fra", addresses)
    if masquerade:  # what a stolen signing key could sign: the host as a masquerading router
        plan = dataclasses.replace(plan, masquerade=True)
    return sign(encode_body(plan, fake_public_key("vps-fra"), scope="wg-mesh/prod", serial=1_700_000_000))


def test_the_agent_applies_a_hosts_plan_whatever_the_document() -> None:
    cfg = single_host()
    trust = dataclasses.replace(trust_of(cfg, "vps-fra"), scope="wg-mesh/prod")
    assert trust.cidrs == () and not trust.forwards and not trust.masquerade
    doc = decode(host_document(cfg), trust)
    assert doc.plan.forward is False  # from agent.json's trust: the document has no say
    want = hostplan.managed(doc.plan, doc.generation, None)  # a host needs no default route: no masquerade
    assert [r for r in want.rule_objects() if r.chain == "FORWARD" or r.table in ("mangle", "nat")] == []
    assert {(r.table, r.chain) for r in want.rule_objects()} == {("raw", "PREROUTING"), ("filter", "INPUT")}
    assert hostplan.parse_managed(want.to_json()) == want
    with pytest.raises(
        DocumentError, match=r"interface\.masquerade: on, and this site.s agent\.json does not allow it"
    ):
        decode(host_document(cfg, masquerade=True), trust)


def test_a_gateways_record_reads_back_as_forwarding() -> None:
    """An applied.json written before single hosts (no `forward` key) is a gateway's; a host's says so."""
    gateway = hostplan.Managed(1, 1360, 51820)
    assert "forward" not in gateway.to_json() and hostplan.parse_managed(gateway.to_json()).forward
    host = dataclasses.replace(gateway, forward=False)
    assert hostplan.parse_managed(host.to_json()) == host
    with pytest.raises(ValueError, match="forward: 'no' is not true or false"):
        hostplan.parse_managed(gateway.to_json().replace("{", '{"forward": "no", ', 1))


def test_the_forwarding_alert_leaves_a_single_host_alone(tmp_path: Path) -> None:
    """Its ip_forward 0 is as it should be: the rules record the sites that forward, and the alert fires for those."""
    cfg = single_host()
    records = [r for g in monitoring.rules(cfg)["groups"] for r in g["rules"] if "record" in r]
    assert [r["labels"]["site"] for r in records if r["record"] == "site:wgmesh_forwards"] == ["aws-use1", "gcp-euw3"]
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (prometheus)")
    (tmp_path / "rules.yml").write_text(monitoring.render_rules(cfg, "test"))
    series = [
        {"series": f'wgmesh_ip_forward_enabled{{job="wg-mesh",site="{site}"}}', "values": "0x10"}
        for site in ("aws-use1", "vps-fra")
    ]
    (alert,) = (a for a in monitoring.alerts() if a.name == "WgMeshForwardingDisabled")
    texts = {"summary": alert.summary, "description": alert.description}
    firing = {
        "exp_labels": {"severity": "critical", "job": "wg-mesh", "site": "aws-use1"},
        "exp_annotations": {k: v.replace("{{ $labels.site }}", "aws-use1") for k, v in texts.items()},
    }
    check = {"eval_time": "5m", "alertname": alert.name, "exp_alerts": [firing]}  # vps-fra's 0: no alert
    case = {"interval": "1m", "input_series": series, "alert_rule_test": [check]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "tests": [case]}))
    result = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_its_firewall_is_its_owners_on_wg0_too() -> None:
    """No INPUT policy in its user data (a gateway's would drop the sites' connections to its services on wg0); a
    static site with a LAN keeps the policy on its gateway's wg0."""
    cfg, with_lan = single_host(), load_mesh(base())
    for mesh, shipped in ((cfg, False), (with_lan, True)):
        text = userdata.render_user_data(mesh, "vps-fra", rendered(mesh, "vps-fra"), directory(mesh))
        assert (inputpolicy.RULES_PATH in text) is shipped and (inputpolicy.UNIT_NAME in text) is shipped
