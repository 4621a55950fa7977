"""The program under mocks, for monitoring: every gateway's user data installs the metrics, and the exporter
port is open to `monitoring_cidrs` only (and to nobody when it is empty), on both clouds."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import yaml

from tests.conftest import STACK_FILES, ProgramRun, run_program
from tests.test_program import (
    AWS_INSTANCE,
    AWS_SG,
    GCP_FIREWALL,
    GCP_INSTANCE,
    RANDOM_BYTES,
    instance_of,
    mesh_of,
    strings_in,
    user_data_input,
)
from wg_mesh.config import AwsSite, GcpSite, StaticSite
from wg_mesh.gateway import wgmetrics
from wg_mesh.gcp.gateway import gateway_tag, stack_scope
from wg_mesh.plan import metrics, render, topology
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

MONITORING_CIDRS = ["10.50.0.0/24", "203.0.113.10/32"]
EXPORTER_PORT = 9200
AWS_USER_DATA_LIMIT = 16384


@pytest.fixture(scope="module")
def monitored() -> ProgramRun:
    """The prod stack (AWS, GCP, static) with a monitoring network and a non-default exporter port."""
    raw = copy.deepcopy(read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml")))
    raw["monitoring_cidrs"] = MONITORING_CIDRS
    raw["exporter_port"] = EXPORTER_PORT
    run = run_program(raw, preview=False, stack="monitored")
    assert run.error is None, run.error
    return run


def site_user_data(run: ProgramRun, name: str) -> str:
    site = mesh_of(run).site(name)
    if isinstance(site, StaticSite):
        value = run.exports["static_site_cloud_init"].value[name]
    else:
        value = user_data_input(instance_of(run, site))
    assert isinstance(value, str)
    return value


def files_of(user_data: str) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in yaml.safe_load(user_data)["write_files"]}


def exporter_rules(run: ProgramRun) -> list[tuple[str, dict[str, Any]]]:
    """Every ingress rule (AWS) or firewall (GCP) that admits TCP to the exporter port."""
    port = mesh_of(run).exporter_port
    found = []
    for sg in run.of_type(AWS_SG):
        for rule in sg.inputs["ingress"]:
            if rule["protocol"] in ("tcp", "6") and rule["fromPort"] <= port <= rule["toPort"]:
                found.append((sg.name, rule))
    for fw in run.of_type(GCP_FIREWALL):
        if any(a["protocol"] == "tcp" and str(port) in a.get("ports", []) for a in fw.inputs["allows"]):
            found.append((fw.name, fw.inputs))
    return found


def test_shipped_stacks_open_the_exporter_to_nobody(applied: ProgramRun) -> None:
    assert mesh_of(applied).monitoring_cidrs == []
    assert exporter_rules(applied) == []
    assert not [fw for fw in applied.of_type(GCP_FIREWALL) if fw.name.endswith("-fw-exporter")]


def test_exporter_port_is_open_to_monitoring_cidrs_on_both_clouds(monitored: ProgramRun) -> None:
    cfg = mesh_of(monitored)
    rules = dict(exporter_rules(monitored))
    for site in cfg.sites:
        if isinstance(site, AwsSite):
            rule = rules[f"{site.name}-sg"]
            assert (rule["protocol"], rule["fromPort"], rule["toPort"]) == ("tcp", EXPORTER_PORT, EXPORTER_PORT)
            assert rule["cidrBlocks"] == MONITORING_CIDRS
        elif isinstance(site, GcpSite):
            fw = rules[f"{site.name}-fw-exporter"]
            assert fw["allows"] == [{"protocol": "tcp", "ports": [str(EXPORTER_PORT)]}]
            assert fw["sourceRanges"] == MONITORING_CIDRS
            assert fw["direction"] == "INGRESS"
            # only the gateway, not the whole network
            assert (
                fw["targetTags"]
                == [gateway_tag(site.name, stack_scope("wg-mesh", "monitored"))]
                == instance_of(monitored, site).inputs["tags"]
            )
    assert len(rules) == sum(isinstance(s, AwsSite | GcpSite) for s in cfg.sites)


def test_monitoring_cidrs_add_one_gcp_firewall_and_nothing_else(monitored: ProgramRun) -> None:
    plain = run_program(read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml")), preview=False)
    assert plain.error is None
    before = {(r.type, r.name) for r in plain.resources}
    after = {(r.type, r.name) for r in monitored.resources}
    assert after - before == {(GCP_FIREWALL, "gcp-euw3-fw-exporter")}
    assert before - after == set()


def test_every_gateway_installs_the_metrics(applied_user_data: ProgramRun) -> None:
    applied = applied_user_data  # delivery: live: tests/test_program_live.py
    cfg = mesh_of(applied)
    for site in cfg.sites:
        user_data = site_user_data(applied, site.name)
        document = yaml.safe_load(user_data)
        assert metrics.NODE_EXPORTER_PACKAGE in document["packages"]
        files = files_of(user_data)
        script = files[metrics.SCRIPT_PATH]
        assert script["encoding"] == "gz+b64" and script["permissions"] == "0755"
        assert metrics.unpack(script["content"]) == metrics.shipped_source()
        # Cloud gateways: every interface, behind the cloud firewall; static sites: the overlay address only.
        address = str(site.overlay_ip) if isinstance(site, StaticSite) else ""
        listen = f"--web.listen-address={address}:{cfg.exporter_port} "
        assert listen in files[metrics.NODE_EXPORTER_DEFAULTS_PATH]["content"]
        assert files[metrics.SERVICE_PATH]["content"] == metrics.service_unit()
        assert files[metrics.TIMER_PATH]["content"] == metrics.timer_unit()
        assert ["systemctl", "enable", "--now", "wg-mesh-metrics.timer"] in document["runcmd"]

        # The mapping names every expected peer with the key the run gave it, and holds no private key.
        mapping = wgmetrics.parse_mapping(files[metrics.MAPPING_PATH]["content"])
        assert mapping.site == site.name and mapping.interface == render.INTERFACE
        assert [(p.site, p.public_key, p.allowed_ips) for p in mapping.peers] == [
            (peer, applied.sites[peer].public_key.value, topology.allowed_ips(cfg, peer))
            for peer in topology.peer_names(cfg, site.name)
        ]
        secrets = applied.private_keys() + [r.outputs["base64"] for r in applied.of_type(RANDOM_BYTES)]
        for path, entry in files.items():
            if path != render.WG_CONF_PATH:
                assert not any(key in entry["content"] for key in secrets), path


def test_monitoring_port_reaches_node_exporter(monitored: ProgramRun) -> None:
    for site in mesh_of(monitored).sites:
        defaults = files_of(site_user_data(monitored, site.name))[metrics.NODE_EXPORTER_DEFAULTS_PATH]["content"]
        address = str(site.overlay_ip) if isinstance(site, StaticSite) else ""
        assert f"--web.listen-address={address}:{EXPORTER_PORT} " in defaults


def test_aws_user_data_fits_the_ec2_limit(applied: ProgramRun) -> None:
    for instance in applied.of_type(AWS_INSTANCE):
        assert len(base64.b64decode(instance.inputs["userDataBase64"])) < AWS_USER_DATA_LIMIT, instance.name


def test_user_data_stays_secret_with_the_metrics(applied_user_data: ProgramRun) -> None:
    applied = applied_user_data  # delivery: live: tests/test_program_live.py
    for instance in applied.of_type(AWS_INSTANCE):
        assert "userDataBase64" in instance.secret_inputs
    for instance in applied.of_type(GCP_INSTANCE):
        assert "metadata" in instance.secret_inputs
    assert all(values.user_data.secret for values in applied.sites.values())
    public = json.dumps([r.public_inputs() for r in applied.resources], default=str)
    assert metrics.MAPPING_PATH not in public  # the whole user data, mapping included, is only in secrets
    assert not any(metrics.SCRIPT_PATH in s for r in applied.resources for s in strings_in(r.public_inputs()))


def test_preview_renders_no_user_data_but_declares_the_exporter_rules() -> None:
    raw = copy.deepcopy(read_raw(next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml")))
    raw["monitoring_cidrs"] = MONITORING_CIDRS
    raw["delivery"] = "user-data"  # live user data holds no peer or key: known in preview (test_program_live.py)
    run = run_program(raw, preview=True)
    assert run.error is None, run.error
    assert not any(values.user_data.known for values in run.sites.values())
    assert run.named(GCP_FIREWALL, "gcp-euw3-fw-exporter").inputs["sourceRanges"] == MONITORING_CIDRS
    assert load_mesh(raw).monitoring_cidrs
