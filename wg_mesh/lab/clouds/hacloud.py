"""The lab's cloud for HA sites (issue 11, docs/ha.md section 11), on top of the live stores (controlplane.py):

* each HA site's second gateway machine (`StandbyGateway`: its own network and mount namespace, its NIC on the
  site's VPC bridge, the same user data as gateway a);
* the AWS cloud model (awsmodel.py, a process in the lab's cloud namespace): moto seeded with what the program
  creates, moto's EIP holder and route targets applied to the namespaces every 50 ms; its change lines are kept
  here (`events`, `holder`);
* the GCP cloud model (gcpmodel.py, a process in the lab's cloud namespace, no emulator exists): the Compute REST
  subset the agents call, Google's probers of each gateway's /healthz and the ILB's failover policy; the address
  holder and the ILB's next hop applied to the namespaces by the same mechanism as AWS's (haapply.py);
* an IMDSv2 model (imds.py) at 169.254.169.254 in each AWS gateway's namespace with that instance's facts, a GCE
  metadata server (gce.py, started by the control plane's `serve_metadata`) in each GCP gateway's with its VM's
  name and zone (hagcp.py); both are the cloud's, not the instance's: they outlive a killed gateway;
* each gateway's user data rendered as the program renders it for its letter (`wg_mesh.plan.ha.aws_ha` / `gcp_ha`), with
  the ids moto assigned or the names the program gives (the program has them from its resources);
* what each gateway finds when it starts: the agent's EnvironmentFile with the metadata endpoint
  (`AWS_EC2_METADATA_SERVICE_ENDPOINT`, botocore's documented override) instead of the live stores' "metadata
  disabled"; on GCP the Compute endpoint (`WG_MESH_COMPUTE_ENDPOINT`).
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

from wg_mesh.config import MeshConfig
from wg_mesh.lab.clouds import hagcp
from wg_mesh.lab.clouds.controlplane import AGENT_ENV, AWS_ENDPOINT, CLOUD_API, REPO_ROOT, ControlPlane, write_atomic
from wg_mesh.lab.clouds.imds import ADDRESS as IMDS_ADDRESS
from wg_mesh.lab.fabric.haplan import SPARE, HaGateway, HaSite, ha_to_json, plan_ha
from wg_mesh.lab.fabric.netns import LabError, LabState, Node, tool_env
from wg_mesh.lab.fabric.networks import ip, veth
from wg_mesh.lab.fabric.plan import BRIDGE, LAB_PROJECT, GatewayArtifacts, LabPlan, SitePlan
from wg_mesh.lab.fabric.procs import stop
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.lab.machines.machine import NamespaceGateway
from wg_mesh.plan import ha as mesh_ha
from wg_mesh.plan import live, userdata

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
    """Gateway `letter`'s user data as `pulumi up` renders it for an HA site (wg_mesh.component: the `ha` object from
    wg_mesh.plan.ha.aws_ha / gcp_ha), with the lab cloud's ids where the program has its resources' (as the lab's public
    addresses replace the clouds' everywhere it renders). `ids`: moto's (AWS), the GCP model's spec entry (GCP)."""
    site = cfg.site(a.site)
    source = live.agent_source(site, LAB_PROJECT, plan.prefix)
    if site.cloud == "gcp":
        ha = hagcp.ha_object(letter, ids)
    else:
        ha = mesh_ha.aws_ha(letter, str(source["region"]), ids["lease_table"], ids["allocation_id"],
                            ids["route_table_ids"])  # fmt: skip
    if a.trust is None:
        raise ValueError(f"{a.site}: not a delivery: live gateway (its artifacts have no trust)")
    user_data = userdata.render_live_user_data(cfg, a.site, source, trust=a.trust, cloud_steps=False, ha=ha)
    return GatewayArtifacts(a.site, a.interface, user_data, a.trust)


class HaCloud:
    """Start with `start()` after the live control plane started (its moto), before the gateways start."""

    def __init__(self, cfg: MeshConfig, lab: BuiltLab, plane: ControlPlane, *, delay_s: float = 0.0) -> None:
        self.cfg, self.lab, self.plane, self.delay_s = cfg, lab, plane, delay_s
        self.sites: dict[str, HaSite] = plan_ha(lab.plan)
        self.standbys: dict[str, StandbyGateway] = {}
        self.placed: dict[str, dict[str, NamespaceGateway]] = {}  # machines started by `place` (site -> place)
        self.ids: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.latest: dict[str, dict[str, Any]] = {}
        # the metadata servers are the cloud's, not the instances': a drill's "kill the instance" spares them
        self.metadata_pids: set[int] = set()
        self.artifacts: dict[tuple[str, str], GatewayArtifacts] = {}
        self.single: dict[str, GatewayArtifacts] = {}  # the site's user data with one gateway (no `ha`: hadowngrade)
        self.associations: dict[str, str] = {}  # AWS: the site's EipAssociation's id, once `pulumi up` created one
        self._models: list[subprocess.Popen[str]] = []
        self._gcp: subprocess.Popen[str] | None = None  # the GCP model (`command`)
        self._sent = 0
        for name, ha in self.sites.items():
            if ha.cloud not in ("aws", "gcp"):
                raise LabError(f"{name}: the lab models HA on AWS and GCP only, not {ha.cloud}")

    def of(self, cloud: str) -> dict[str, HaSite]:
        return {name: ha for name, ha in self.sites.items() if ha.cloud == cloud}

    def machines(self, site: str) -> dict[str, NamespaceGateway]:
        a = self.lab.machines[site]
        assert isinstance(a, NamespaceGateway)
        return {"a": a, "b": self.standbys[site], **self.placed.get(site, {})}

    def place(self, site: str, place: str, letter: str) -> NamespaceGateway:
        """A new instance with gateway `letter`'s user data in `place` (a, b or the spare place c: its NIC, IMDS and
        moto instance stay; a place whose instance was terminated is reused, id and all), not started yet: the drill's
        replacement beside the old instance (Pulumi's create before delete)."""
        lab, g = self.lab, self.sites[site].gateway(place)
        machine = StandbyGateway(lab.plan, lab.plan.site(site), self.artifacts[site, letter], lab.state, g)
        machine.provisioner = self
        self.placed.setdefault(site, {})[place] = machine
        if self.sites[site].cloud == "gcp":  # a new VM in the replaced gateway's zone (its group's), in no group yet
            zone = self.ids[site]["vms"][letter]["zone"]
            hagcp.place_vm(self.plane.root / "gce" / f"{site}-{place}", g.netns, zone)
            self.command(site, op="vm", place=place, zone=zone)
        return machine

    def place_single(self, site: str, place: str) -> NamespaceGateway:
        """`gateways: 2` -> 1 (hadowngrade.py): the site's new single gateway in `place`, with the user data of a site
        with one gateway (no `ha` object: no HA agent), not started yet. GCP: its VM, in gateway a's zone and in no
        group (Pulumi replaces a's instance: the same zone)."""
        lab, g = self.lab, self.sites[site].gateway(place)
        machine = StandbyGateway(lab.plan, lab.plan.site(site), self.single[site], lab.state, g)
        machine.provisioner = self
        self.placed.setdefault(site, {})[place] = machine
        if self.sites[site].cloud == "gcp":
            zone = self.ids[site]["vms"]["a"]["zone"]
            hagcp.place_vm(self.plane.root / "gce" / f"{site}-{place}", g.netns, zone)
            self.command(site, op="vm", place=place, zone=zone)
        return machine

    def aws(self, site: str, op: str, name: str, value: str = "") -> dict[str, Any]:
        """What `pulumi up` does to one of the site's AWS resources (awsctl.py's operations), in moto: the answer. An
        EipAssociation's id is kept (`associations`): the resource's id in Pulumi's state, which its delete names."""
        done = self.plane.aws_request(op, str(self.plane.configs[site]["source"]["region"]), name, value)
        if op == "associate-address":
            self.associations[site] = str(done["association_id"])
        return done

    def gcp_gate(self, site: str, place: str, letter: str = "a", wait_only: bool = False) -> float:
        """GCP: a gateway's readiness gate, as `pulumi up` runs it (`python -m wg_mesh.readygate gcp`, its own
        Compute client against the model, with a token the model admits): waits for the ready mark of the VM in
        `place` (in gateway `letter`'s zone), then moves the static address to it (a single gateway's; `wait_only`:
        an HA gateway's, `--wait-only`, the agents own the address). Returns the gate's wall time; LabError if it
        failed."""
        entry = self.ids[site]
        zone, name = entry["vms"][letter]["zone"], self.sites[site].gateway(place).netns  # hagcp: VMs are named so
        token = self.lab.state.log_dir / f"gate-token-{site}"
        write_atomic(token, entry["tokens"][0].encode(), 0o600)
        project = f"projects/{entry['project']}"
        argv = [sys.executable, "-m", "wg_mesh.readygate", "gcp", "--api", hagcp.COMPUTE_ENDPOINT,
                "--access-token-file", str(token), "--interval", "0.2", "--timeout", str(START_TIMEOUT_S),
                "--instance", f"{project}/zones/{zone}/instances/{name}",
                "--address", f"{project}/regions/{entry['region']}/addresses/{entry['address']}",
                *(["--wait-only"] if wait_only else [])]  # fmt: skip
        started = time.monotonic()
        node, env = Node(self.plane.netns), {"PYTHONPATH": REPO_ROOT}
        done = node.run(argv, timeout=START_TIMEOUT_S + 10, check=False, env=env)
        if done.returncode:
            raise LabError(f"{site}: the readiness gate of place {place} failed: {done.stderr.strip()[-300:]}")
        return time.monotonic() - started

    def join(self, site: str, place: str, letter: str) -> None:
        """GCP: the readiness gate passed, `pulumi up` updates gateway `letter`'s instance group to hold the VM in
        `place` instead of the old one (one update; wg_mesh.gcp, docs/ha.md 6.4). AWS: nothing (no group)."""
        if self.sites[site].cloud == "gcp":
            self.command(site, op="group", group=letter, members=[place])

    def retire(self, site: str, place: str) -> None:
        """The instance in `place` is deleted (its processes are killed by the drill): GCP's VM and its access
        config go; AWS's instance stays in moto (its ENI's association is what the model reads)."""
        if self.sites[site].cloud == "gcp":
            self.command(site, op="delete", place=place)

    def command(self, site: str, **line: Any) -> None:
        """One line to the GCP model (gcpmodel.commands), waited for until acknowledged."""
        assert self._gcp is not None and self._gcp.stdin is not None
        self._sent += 1
        self._gcp.stdin.write(json.dumps({"id": self._sent, "site": site, **line}) + "\n")
        self._gcp.stdin.flush()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ack = next((e for e in reversed(self.events) if e.get("ack") == self._sent), None)
            if ack is not None:
                if "error" in ack:
                    raise LabError(f"the GCP model refused {line}: {ack['error']}")
                return
            time.sleep(POLL_INTERVAL_S)
        raise LabError(f"the GCP model did not acknowledge {line}")

    def start(self) -> None:
        """Seed moto and start its model, then each gateway's machine (a's replaced: its user data now has the ids),
        IMDS and provisioning; the caller starts the machines (a first: it claims the EIP first)."""
        lab = self.lab
        if self.of("aws"):
            self._start_model()
        if self.of("gcp"):
            self._start_gcp_model()
        for name, ha in self.sites.items():
            ids, old = self.ids[name], lab.machines[name]
            self.single[name] = old.artifacts  # rendered as for `gateways: 1` (the lab renders no `ha` object)
            for letter in ("a", "b"):
                self.artifacts[name, letter] = ha_artifacts(self.cfg, lab.plan, old.artifacts, letter, ids)
                self.renew(name, letter)
                if ha.cloud == "gcp":
                    root = hagcp.metadata_root(self.plane.root / "gce" / name, ids, letter)
                    g = ha.gateway(letter)
                    self.metadata_pids.add(self.plane.serve_metadata(g.netns, f"metadata-{name}-{letter}", root))
                else:
                    self._start_imds(ha, letter)
            self.standbys[name].attach()  # a's NIC is attached already (build; this runs after it)
            if SPARE in (g.letter for g in ha.gateways):  # the spare place: its NIC and IMDS/metadata, no machine yet
                if ha.cloud == "gcp":
                    root = hagcp.metadata_root(self.plane.root / "gce" / name, ids, SPARE)
                    c = ha.gateway(SPARE)
                    self.metadata_pids.add(self.plane.serve_metadata(c.netns, f"metadata-{name}-{SPARE}", root))
                else:
                    self._start_imds(ha, SPARE)
                StandbyGateway(lab.plan, lab.plan.site(name), self.artifacts[name, "a"], lab.state,
                               ha.gateway(SPARE)).attach()  # fmt: skip

    def renew(self, name: str, letter: str) -> NamespaceGateway:
        """A new machine object for the gateway (a new instance in the same place: its NIC and IMDS stay), not
        started yet."""
        lab, site = self.lab, self.lab.plan.site(name)
        machine: NamespaceGateway
        self.placed.get(name, {}).pop(letter, None)
        if letter == "a":
            machine = NamespaceGateway(lab.plan, site, self.artifacts[name, letter], lab.state)
            lab.machines[name] = machine
        else:
            g = self.sites[name].gateway(letter)
            machine = self.standbys[name] = StandbyGateway(lab.plan, site, self.artifacts[name, letter], lab.state, g)
        machine.provisioner = self
        return machine

    def _start_model(self) -> None:
        region = {str(self.plane.configs[n]["source"]["region"]) for n in self.of("aws")}
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
                for name, ha in self.of("aws").items()
            ],
        }
        ready = self._model_process("awsmodel", [AWS_ENDPOINT], spec, "aws cloud model (moto -> namespaces)")
        if not ready.get("ok"):
            raise LabError(f"the AWS cloud model could not seed moto: {ready.get('error')}")
        self.ids.update(ready["sites"])

    def _start_gcp_model(self) -> None:
        entries = [hagcp.site_entry(self.cfg, self.lab.plan.prefix, ha, self.plane.tokens[name])
                   for name, ha in self.of("gcp").items()]  # fmt: skip
        spec = {"interval": POLL_INTERVAL_S, "sites": entries}
        argv = [str(CLOUD_API.ip), str(hagcp.COMPUTE_PORT)]
        ready = self._model_process("gcpmodel", argv, spec, "gcp cloud model (Compute, probers -> namespaces)")
        self._gcp = self._models[-1]
        if not ready.get("ok"):
            raise LabError(f"the GCP cloud model did not start: {ready.get('error')}")
        self.ids.update({entry["site"]: entry for entry in entries})

    def _model_process(self, module: str, argv: list[str], spec: dict[str, Any], what: str) -> dict[str, Any]:
        """Start `python -m wg_mesh.lab.clouds.<module> ARGV` in the cloud namespace, give it the spec, read its ready
        line; its later lines are collected (`events`, `latest`)."""
        log = (self.lab.state.log_dir / f"{module}.log").open("a")
        model = subprocess.Popen(
            Node(self.plane.netns).wrap([sys.executable, "-m", f"wg_mesh.lab.clouds.{module}", *argv]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env=tool_env({"PYTHONPATH": REPO_ROOT}), start_new_session=True,
        )  # fmt: skip
        log.close()
        self._models.append(model)
        self.lab.state.track(model.pid, self.plane.netns, what)
        assert model.stdin is not None and model.stdout is not None
        model.stdin.write(json.dumps(spec) + "\n")
        model.stdin.flush()
        line = model.stdout.readline()
        ready: dict[str, Any] = json.loads(line) if line else {"ok": False, "error": f"{module} ended"}
        if ready.get("ok"):
            threading.Thread(target=self._collect, args=(model,), daemon=True).start()
        return ready

    def _collect(self, model: subprocess.Popen[str]) -> None:
        assert model.stdout is not None
        for line in model.stdout:
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
            proc = Node(g.netns).popen([sys.executable, "-m", "wg_mesh.lab.clouds.imds", str(root)], stdout=log,
                                       env={"PYTHONPATH": REPO_ROOT})  # fmt: skip
        self.lab.state.track(proc.pid, g.netns, "IMDSv2 model")
        self.metadata_pids.add(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "listening" not in (path.read_text() if path.exists() else ""):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise LabError(f"the lab's IMDS model for {ha.site}-{letter} did not start (see {path})")
            time.sleep(0.05)

    def provision_network(self, site: str, netns: str) -> None:
        """machine.Provisioner: nothing for an HA site (its gateways' metadata servers run from `start`, they outlive
        instances), the control plane's for another."""
        if site not in self.sites:
            self.plane.provision_network(site, netns)

    def provision_files(self, site: str, path: Callable[[str], Path]) -> None:
        """machine.Provisioner: the control plane's files, the agent's EnvironmentFile with the IMDS endpoint (AWS)
        or the Compute endpoint (GCP)."""
        self.plane.provision_files(site, path)
        env = path(str(AGENT_ENV))
        text = env.read_text()
        text = text + hagcp.ENV_LINE + "\n" if self.sites[site].cloud == "gcp" else ha_env(text)
        write_atomic(env, text.encode(), 0o644)

    def holder(self, site: str) -> str | None:
        return self.latest.get(site, {}).get("holder")

    def holders(self, site: str) -> list[str]:
        """Every gateway holding the site's public address in the cloud's state (AWS: at most the one ENI moto
        associates it with; GCP: every VM whose access config has it)."""
        latest = self.latest.get(site, {})
        if "holders" in latest:
            return list(latest["holders"])
        return [latest["holder"]] if latest.get("holder") else []

    def stop(self) -> None:
        for model in self._models:
            stop(model)
