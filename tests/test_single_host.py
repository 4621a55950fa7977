"""A single-host static site: a bare-metal server with nothing behind it, reached at its overlay address (issue 23).

Pure: the config, the peers' AllowedIPs, what the other sites route and admit, wg0.conf and user data of both
delivery modes, the agent's trust, the route quotas, and the lab's refusal."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_config import base, problems_for, with_change
from tests.test_render import directory, rendered
from wg_mesh.config import MeshConfig, StaticSite
from wg_mesh.config.quotas import aws_routes_per_table
from wg_mesh.gateway.trust import parse_trust
from wg_mesh.lab.fabric.plan import LabPlanError, plan_lab
from wg_mesh.plan import live, topology, userdata
from wg_mesh.plan.validate import load_mesh

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


def test_the_lab_refuses_it_by_name() -> None:
    with pytest.raises(LabPlanError, match=r"sites\[2\]: vps-fra is a single host \(no cidrs\)"):
        plan_lab(single_host(), "wgl0c0c")
