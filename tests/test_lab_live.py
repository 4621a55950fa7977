"""`delivery: live` in the lab, the pure parts: the user data's agent commands as the lab carries them out, the
documents the lab's control plane publishes, what tells the lab a mesh is live."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.signed import verified_body
from wg_mesh.gateway import ship
from wg_mesh.lab.clouds.controlplane import agent_env, documents, published_generation
from wg_mesh.lab.clouds.live import live_configs
from wg_mesh.lab.fabric.plan import GatewayArtifacts, LabKeys, plan_lab, render_artifacts
from wg_mesh.lab.machines import cloudinit
from wg_mesh.tools.stackfile import load

ROOT = Path(__file__).resolve().parent.parent
UNIT = """[Unit]
Description=wg-mesh agent
After=wg-quick@wg0.service

[Service]
Environment=PYTHONPATH=/usr/local/lib/wg-mesh "LC_ALL=C.UTF-8"
EnvironmentFile=-/etc/default/wg-mesh-agent
ExecStart=/usr/bin/python3 -m wgmesh_gateway.agent --config /etc/wg-mesh/agent.json
Restart=always
"""
AGENT_JSON = {"site": "aws-use1", "interface": "wg0", "poll_seconds": 10, "source": {"kind": "file"}}
ONCE = ["python3", "-m", "wgmesh_gateway.agent", "--config", "/etc/wg-mesh/agent.json", "--once", "--timeout", "60"]


def live_user_data(runcmd: list[Any], unit: str = UNIT) -> str:
    doc = {
        "write_files": [
            {"path": "/etc/wg-mesh/agent.json", "content": json.dumps(AGENT_JSON)},
            {"path": "/usr/local/lib/wg-mesh/wgmesh_gateway/agent.py", "content": "print('agent')\n"},
            {"path": "/etc/systemd/system/wg-mesh-agent.service", "content": unit},
        ],
        "runcmd": runcmd,
    }
    return "#cloud-config\n" + yaml.safe_dump(doc)


def test_agent_commands_run_in_order_with_the_units_environment_and_the_system_python() -> None:
    setup = cloudinit.interpret(
        live_user_data(
            [
                ["chmod", "0700", "/etc/wireguard"],
                ONCE,
                ["systemctl", "enable", "--now", "wg-quick@wg0"],
                ["systemctl", "enable", "--now", "wg-mesh-agent"],
            ]
        )
    )
    assert [s.kind for s in setup.steps] == ["chmod", "agent-once", "wg-quick", "service"]
    once, service = setup.steps[1], setup.steps[3]
    assert once.argv == ("/usr/bin/python3", *ONCE[1:])  # Debian's python3, never the lab's venv
    assert dict(once.env) == {"PYTHONPATH": "/usr/local/lib/wg-mesh", "LC_ALL": "C.UTF-8"}
    assert service.argv == ("/usr/bin/python3", "-m", "wgmesh_gateway.agent", "--config", "/etc/wg-mesh/agent.json")
    assert service.unit is not None and service.unit.environment_files == (
        (PurePosixPath("/etc/default/wg-mesh-agent"), True),
    )
    assert setup.notes == ()


def test_an_env_prefix_is_kept_and_other_commands_are_not_run() -> None:
    setup = cloudinit.interpret(
        live_user_data(
            [
                ["env", "PYTHONPATH=/opt/x", *ONCE],
                ["python3", "-m", "http.server"],
                ["systemctl", "enable", "--now", "wg-mesh-metrics.timer"],
            ]
        )
    )
    assert [s.kind for s in setup.steps] == ["agent-once"]
    assert dict(setup.steps[0].env)["PYTHONPATH"] == "/opt/x"  # the command's own env wins over the unit's
    assert setup.notes == (
        "runcmd not run in the lab: python3 -m http.server",
        "runcmd not run in the lab: systemctl enable --now wg-mesh-metrics.timer",
    )


def test_a_unit_without_execstart_is_refused() -> None:
    with pytest.raises(cloudinit.UserDataError, match="no ExecStart"):
        cloudinit.interpret(live_user_data([], unit="[Service]\nRestart=always\n"))


def test_environment_file_syntax() -> None:
    text = '# lab\nAWS_ENDPOINT_URL=http://198.19.255.254:5000\n; x\nA="quoted value"\nnot a line\n'
    assert cloudinit.parse_env_file(text) == {"AWS_ENDPOINT_URL": "http://198.19.255.254:5000", "A": "quoted value"}
    assert "AWS_ENDPOINT_URL=http://198.19.255.254:5000" in agent_env({"kind": "aws"})
    assert "WG_MESH_SECRET_MANAGER_URL=" in agent_env({"kind": "gcp"})
    assert "AWS" not in agent_env({"kind": "file"})


def test_documents_describe_the_mesh_of_the_named_sites_only_signed_with_the_key_the_user_data_pins() -> None:
    cfg = load(ROOT / "Pulumi.prod.yaml")
    plan = plan_lab(cfg, "wgl0000")
    keys = LabKeys.generate(cfg)
    trust = live_configs(render_artifacts(cfg, plan, keys))["aws-use1"]["trust"]
    assert trust["signing_key"] == keys.verify_key and trust["scope"] == "wg-mesh-lab/wgl0000"
    signed = {"scope": trust["scope"], "serial": 1_767_225_600, "seed": keys.signing}
    two = documents(cfg, plan, keys.public, ["aws-use1", "gcp-euw3"], **signed)
    three = documents(cfg, plan, keys.public, [s.name for s in cfg.sites], **signed)
    assert set(two) == {"aws-use1", "gcp-euw3"}
    a2, a3 = verified_body(two["aws-use1"], trust), verified_body(three["aws-use1"], trust)
    assert [p["name"] for p in a2["interface"]["peers"]] == ["gcp-euw3"]
    assert sorted(p["name"] for p in a3["interface"]["peers"]) == ["gcp-euw3", "vps-fra"]
    assert a2["generation"] != a3["generation"] and a3["public_key"] == keys.public["aws-use1"]
    assert published_generation(three["aws-use1"], trust) == a3["generation"]
    # what the lab's bookkeeping counts as not applicable: another site's, another key's, not a document
    assert published_generation(three["gcp-euw3"], trust) is None
    assert published_generation(three["aws-use1"], {**trust, "signing_key": LabKeys.generate(cfg).verify_key}) is None
    assert published_generation('{"format": "wg-mesh.peers/1", "site": ', trust) is None


def test_user_data_mode_is_not_live_and_a_half_live_mesh_is_refused() -> None:
    cfg = load(ROOT / "Pulumi.dev.yaml")
    plan = plan_lab(cfg, "wgl0000")
    artifacts = render_artifacts(cfg, plan, LabKeys.generate(cfg))
    assert live_configs(artifacts) == {}
    name = next(iter(artifacts))
    mixed = {**artifacts, name: GatewayArtifacts(name, artifacts[name].interface, live_user_data([]))}
    with pytest.raises(cloudinit.UserDataError, match="installs no agent while the others' do"):
        live_configs(mixed)


SH_ONCE = [
    "sh",
    "-c",
    "set -a; if [ -r /etc/default/wg-mesh-agent ]; then . /etc/default/wg-mesh-agent; fi; "
    "PYTHONPATH=/usr/local/lib/wg-mesh exec python3 -m wgmesh_gateway.agent --config /etc/wg-mesh/agent.json "
    "--once --timeout 300",
]


def test_a_once_command_through_sh_reads_the_environment_file_it_sources() -> None:
    """The form that makes the first run see the service's optional environment file, as cloud-init runs it."""
    setup = cloudinit.interpret(live_user_data([SH_ONCE, ["systemctl", "enable", "--now", "wg-mesh-agent.service"]]))
    once, service = setup.steps
    assert once.kind == "agent-once" and once.argv[:3] == ("/usr/bin/python3", "-m", "wgmesh_gateway.agent")
    assert once.argv[-3:] == ("--once", "--timeout", "300")
    assert dict(once.env) == {"PYTHONPATH": "/usr/local/lib/wg-mesh"}
    assert once.env_files == ((PurePosixPath("/etc/default/wg-mesh-agent"), True),)
    assert service.kind == "service" and service.env_files == ((PurePosixPath("/etc/default/wg-mesh-agent"), True),)
    # A script that does anything else is not run (listed as such).
    other = ["sh", "-c", "curl http://x | sh; exec python3 -m wgmesh_gateway.agent --once"]
    assert cloudinit.interpret(live_user_data([other])).notes == (f"runcmd not run in the lab: {' '.join(other)}",)


def test_an_aws_once_command_installs_the_bundle_first() -> None:
    """ship.once_command(bundled=True), exactly as AWS and GCP user data carry it: the bootstrap runs first, with the
    agent's environment, and must succeed; anything else chained with && is not run."""
    setup = cloudinit.interpret(live_user_data([ship.once_command(bundled=True)]))
    (once,) = setup.steps
    assert once.argv[:3] == ("/usr/bin/python3", "-m", "wgmesh_gateway.agent") and "--once" in once.argv
    assert once.before == (
        ("/usr/bin/python3", "-m", "wgmesh_gateway.bootstrap", "--config", ship.CONFIG_PATH, "--timeout", "300",
         "--lib", ship.LIB_DIR),
    )  # fmt: skip
    assert dict(once.env) == {"PYTHONPATH": ship.LIB_DIR}
    chained = ["sh", "-c", "set -a; rm -rf /x && exec python3 -m wgmesh_gateway.agent --once"]
    assert cloudinit.interpret(live_user_data([chained])).notes == (f"runcmd not run in the lab: {' '.join(chained)}",)
