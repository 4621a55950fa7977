"""The lab's cloud for HA sites (issue 11, docs/ha.md section 11), on top of the live stores (controlplane.py):

* each HA site's second gateway machine (`StandbyGateway`: its own network and mount namespace, its NIC on the
  site's VPC bridge, the same user data as gateway a);
* the AWS cloud model (awsmodel.py, a process in the lab's cloud namespace): moto seeded with what the program
  creates, moto's EIP holder and route targets applied to the namespaces every 50 ms; its change lines are kept
  here (`events`, `holder`);
* an IMDSv2 model (imds.py) at 169.254.169.254 in each AWS gateway's namespace with that instance's facts;
* each gateway's user data rendered as the program renders it for its letter (`mesh.ha.aws_ha`), with the ids moto
  assigned (the program has them from its resources);
* what each gateway finds when it starts: the agent's EnvironmentFile with the metadata endpoint
  (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, botocore's documented override) instead of the live stores' "metadata
  disabled".
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mesh import ha as mesh_ha
from mesh import live, userdata
from mesh.config import MeshConfig
from mesh.lab.build import BuiltLab
from mesh.lab.controlplane import AGENT_ENV, AWS_ENDPOINT, REPO_ROOT, ControlPlane, write_atomic
from mesh.lab.fabric import ip, veth
from mesh.lab.haplan import HaGateway, HaSite, ha_to_json, plan_ha
from mesh.lab.imds import ADDRESS as IMDS_ADDRESS
from mesh.lab.machine import NamespaceGateway
from mesh.lab.netns import LabError, LabState, Node, tool_env
from mesh.lab.plan import BRIDGE, LAB_PROJECT, GatewayArtifacts, LabPlan, SitePlan
from mesh.lab.procs import stop

START_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
IMDS_ENDPOINT = f"http://{IMDS_ADDRESS}/"


class StandbyGateway(NamespaceGateway):
    """Gateway b of an HA site: the site's user data in its own namespaces, its NIC on the site's VPC bridge."""

    def __init__(self, plan: LabPlan, site: SitePlan, artifacts: GatewayArtifacts, state: LabState, g: HaGateway):
        super().__init__(plan, replace(site, gateway_ns=g.netns, gateway_ip=g.private_ip), artifacts, state)
        self.gateway = g

    @property
    def log_path(self) -> Path:
        return self.state.log_dir / f"{self.site.name}-{self.gateway.letter}.log"

    def attach(self, later: bool = False) -> None:
        site, g = self.site, self.gateway
        assert site.vpc_ns is not None and site.router_ip is not None
        veth(site.vpc_ns, g.bridge_port, g.netns, site.gateway_nic, site.nic_mtu)
        ip(site.vpc_ns, "link", "set", g.bridge_port, "mtu", site.nic_mtu, "master", BRIDGE, "up")
        ip(g.netns, "address", "add", g.private_ip, "dev", site.gateway_nic)
        ip(g.netns, "route", "add", "default", "via", site.router_ip.ip)


def ha_env(text: str) -> str:
    """The live stores' environment file for an HA gateway: the instance metadata reachable (the agent learns its
    instance and ENI from it), at its documented endpoint."""
    lines = [line for line in text.splitlines() if not line.startswith("AWS_EC2_METADATA_DISABLED=")]
    return "\n".join([*lines, f"AWS_EC2_METADATA_SERVICE_ENDPOINT={IMDS_ENDPOINT}"]) + "\n"


def ha_artifacts(
    cfg: MeshConfig, plan: LabPlan, a: GatewayArtifacts, letter: str, ids: dict[str, Any]
) -> GatewayArtifacts:
    """Gateway `letter`'s user data as `pulumi up` renders it for an HA site (mesh.component: the `ha` object from
    mesh.ha.aws_ha), with the lab cloud's ids where the program has its resources' (as the lab's public addresses
    replace the clouds' everywhere it renders)."""
    site = cfg.site(a.site)
    source = live.agent_source(site, LAB_PROJECT, plan.prefix)
    region = str(source["region"])
    ha = mesh_ha.aws_ha(letter, region, ids["lease_table"], ids["allocation_id"], ids["route_table_ids"])
    user_data = userdata.render_live_user_data(cfg, a.site, source, cloud_steps=False, ha=ha)
    return GatewayArtifacts(a.site, a.interface, user_data)


class HaCloud:
    """Start with `start()` after the live control plane started (its moto), before the gateways start."""

    def __init__(self, cfg: MeshConfig, lab: BuiltLab, plane: ControlPlane, *, delay_s: float = 0.0) -> None:
        self.cfg, self.lab, self.plane, self.delay_s = cfg, lab, plane, delay_s
        self.sites: dict[str, HaSite] = plan_ha(lab.plan)
        self.standbys: dict[str, StandbyGateway] = {}
        self.ids: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.latest: dict[str, dict[str, Any]] = {}
        self.imds_pids: set[int] = set()  # the cloud's, not the instances': a drill's "kill the instance" spares them
        self.artifacts: dict[tuple[str, str], GatewayArtifacts] = {}
        self._model: subprocess.Popen[str] | None = None
        for name, ha in self.sites.items():
            if ha.cloud != "aws":
                raise LabError(f"{name}: the lab models HA on AWS only (the GCP model of docs/ha.md 11 is not built)")

    def machines(self, site: str) -> dict[str, NamespaceGateway]:
        a = self.lab.machines[site]
        assert isinstance(a, NamespaceGateway)
        return {"a": a, "b": self.standbys[site]}

    def start(self) -> None:
        """Seed moto and start its model, then each gateway's machine (a's replaced: its user data now has the ids),
        IMDS and provisioning; the caller starts the machines (a first: it claims the EIP first)."""
        lab = self.lab
        self._start_model()
        for name, ha in self.sites.items():
            ids, old = self.ids[name], lab.machines[name]
            for letter in ("a", "b"):
                self.artifacts[name, letter] = ha_artifacts(self.cfg, lab.plan, old.artifacts, letter, ids)
                self.renew(name, letter)
                self._start_imds(ha, letter)
            self.standbys[name].attach()  # a's NIC is attached already (build; this runs after it)

    def renew(self, name: str, letter: str) -> NamespaceGateway:
        """A new machine object for the gateway (a new instance in the same place: its NIC and IMDS stay), not
        started yet."""
        lab, site = self.lab, self.lab.plan.site(name)
        machine: NamespaceGateway
        if letter == "a":
            machine = NamespaceGateway(lab.plan, site, self.artifacts[name, letter], lab.state)
            lab.machines[name] = machine
        else:
            g = self.sites[name].gateway(letter)
            machine = self.standbys[name] = StandbyGateway(lab.plan, site, self.artifacts[name, letter], lab.state, g)
        machine.provisioner = self
        return machine

    def _start_model(self) -> None:
        region = {str(self.plane.configs[n]["source"]["region"]) for n in self.sites}
        if len(region) != 1:
            raise LabError(f"the lab's AWS model takes HA sites of one region, not {sorted(region)}")
        spec = {
            "region": region.pop(),
            "interval": POLL_INTERVAL_S,
            "delay": self.delay_s,
            "sites": [
                {
                    **ha_to_json(ha),
                    "vpc_cidr": str(self.cfg.site(name).cidrs[0]),
                    "lease_table": mesh_ha.ha_names(LAB_PROJECT, self.lab.plan.prefix, name).lease_table,
                }
                for name, ha in self.sites.items()
            ],
        }
        cloud = Node(self.plane.netns)
        log = (self.lab.state.log_dir / "awsmodel.log").open("a")
        self._model = subprocess.Popen(
            cloud.wrap([sys.executable, "-m", "mesh.lab.awsmodel", AWS_ENDPOINT]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env=tool_env({"PYTHONPATH": REPO_ROOT}), start_new_session=True,
        )  # fmt: skip
        log.close()
        self.lab.state.track(self._model.pid, self.plane.netns, "aws cloud model (moto -> namespaces)")
        assert self._model.stdin is not None and self._model.stdout is not None
        self._model.stdin.write(json.dumps(spec) + "\n")
        self._model.stdin.flush()
        line = self._model.stdout.readline()
        ready: dict[str, Any] = json.loads(line) if line else {"ok": False, "error": "the cloud model ended"}
        if not ready.get("ok"):
            raise LabError(f"the AWS cloud model could not seed moto: {ready.get('error')}")
        self.ids = ready["sites"]
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self._model is not None and self._model.stdout is not None
        for line in self._model.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                self.events.append(event)
                if "holder" in event:
                    self.latest[event["site"]] = event

    def _start_imds(self, ha: HaSite, letter: str) -> None:
        g = ha.gateway(letter)
        facts = {**self.ids[ha.site]["instances"][letter], "region": self.plane.configs[ha.site]["source"]["region"]}
        root = self.plane.root / "imds" / f"{ha.site}-{letter}.json"
        write_atomic(root, json.dumps(facts).encode(), 0o644)
        ip(g.netns, "address", "add", f"{IMDS_ADDRESS}/32", "dev", "lo")
        name = f"imds-{ha.site}-{letter}"
        path = self.lab.state.log_dir / f"{name}.log"
        with path.open("a") as log:
            proc = Node(g.netns).popen([sys.executable, "-m", "mesh.lab.imds", str(root)], stdout=log,
                                       env={"PYTHONPATH": REPO_ROOT})  # fmt: skip
        self.lab.state.track(proc.pid, g.netns, "IMDSv2 model")
        self.imds_pids.add(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "listening" not in (path.read_text() if path.exists() else ""):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise LabError(f"the lab's IMDS model for {ha.site}-{letter} did not start (see {path})")
            time.sleep(0.05)

    def provision_network(self, site: str, netns: str) -> None:
        """machine.Provisioner: the control plane's (an AWS gateway's IMDS runs from `start`, it outlives instances)."""
        self.plane.provision_network(site, netns)

    def provision_files(self, site: str, path: Callable[[str], Path]) -> None:
        """machine.Provisioner: the control plane's files, the agent's EnvironmentFile with the IMDS endpoint."""
        self.plane.provision_files(site, path)
        env = path(str(AGENT_ENV))
        write_atomic(env, ha_env(env.read_text()).encode(), 0o644)

    def holder(self, site: str) -> str | None:
        return self.latest.get(site, {}).get("holder")

    def stop(self) -> None:
        if self._model is not None:
            stop(self._model)
