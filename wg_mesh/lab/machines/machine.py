"""A gateway machine: what the lab's topology, checks and report need from a gateway, whatever runs it.

Two implementations share everything else in the lab:

* `NamespaceGateway` (the default, fast mode): the gateway's network namespace plus a private mount
  namespace; the lab's interpreter (`cloudinit.py`) carries out the user data there (files, sysctl, the
  real `wg-quick up`).
* `ContainerGateway` (`--boot`, in container.py): a systemd-nspawn container booted from a Debian image with
  the user data as its NoCloud seed; cloud-init and systemd carry it out themselves.
"""

from __future__ import annotations

import os
import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

from wg_mesh.lab.fabric.netns import WG_QUICK_ENV, LabError, LabState, Node, start_holder
from wg_mesh.lab.fabric.networks import ip, plug_cloud_gateway, plug_static_gateway, sysctl, veth
from wg_mesh.lab.fabric.plan import BRIDGE_GW_PORT, GW_LAN, NIC, GatewayArtifacts, LabPlan, SitePlan
from wg_mesh.lab.fabric.resolver import write_resolv_conf
from wg_mesh.lab.machines import cloudinit
from wg_mesh.plan.render import INTERFACE

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_ONCE_TIMEOUT_S = 120.0
_KEY = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")


def redact_keys(text: str) -> str:
    """wg(8) quotes a line it cannot parse, key included: logs and errors never carry key material."""
    return _KEY.sub("(key redacted)", text)


class Provisioner(Protocol):
    """What a starting gateway finds in place before its user data runs (`delivery: live`: the lab's clouds,
    controlplane.ControlPlane)."""

    def provision_files(self, site: str, path: Callable[[str], Path]) -> None:
        """The files the gateway finds on its disk (`path`: a path inside the gateway -> where to write it)."""

    def provision_network(self, site: str, netns: str) -> None:
        """What the gateway's own network namespace serves it (GCP: the metadata server)."""


class GatewayMachine(ABC):
    """One site's gateway. `attach` plugs its NICs into the fabric, `start` carries out its user data and
    returns when that is done, `node` is where commands run, `tunnel` takes wg0 down or up."""

    kind: ClassVar[str]
    names_netns: ClassVar[bool] = False  # True: the machine brings its own netns and names it gateway_ns

    def __init__(self, plan: LabPlan, site: SitePlan, artifacts: GatewayArtifacts, state: LabState) -> None:
        self.plan = plan
        self.site = site
        self.artifacts = artifacts
        self.state = state
        self._node: Node | None = None
        # `delivery: live`: the lab's clouds hand a starting gateway what it finds there before its user data runs
        # (the agent's EnvironmentFile, a static site's files, GCP's metadata server).
        self.provisioner: Provisioner | None = None
        self.plugged = False  # its NICs are in the fabric (a site's host is built once its gateway is plugged)

    @property
    def node(self) -> Node:
        if self._node is None:
            raise LabError(f"{self.site.name}: the gateway is not running")
        return self._node

    @property
    def log_path(self) -> Path:
        return self.state.log_dir / f"{self.site.name}.log"

    def log(self, text: str) -> None:
        with self.log_path.open("a") as log:
            log.write(text)

    def notes(self) -> list[str]:
        """What this machine did not do of the user data, for the report."""
        return []

    @abstractmethod
    def attach(self, later: bool = False) -> None:
        """Plug the gateway's NICs into the fabric. `later`: it starts later than the others (the drill's added
        site); a booted gateway is then launched by `start`."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def tunnel(self, verb: str) -> None:
        """`down` or `up` the WireGuard interface, as an operator on the gateway would."""


class NamespaceGateway(GatewayMachine):
    """The gateway's own netns and mount namespace; the lab carries out the user data itself."""

    kind = "namespace"

    def __init__(self, plan: LabPlan, site: SitePlan, artifacts: GatewayArtifacts, state: LabState) -> None:
        super().__init__(plan, site, artifacts, state)
        self.setup = cloudinit.interpret(artifacts.user_data)
        self.daemons: list[subprocess.Popen[str]] = []

    def notes(self) -> list[str]:
        return list(self.setup.notes)

    def attach(self, later: bool = False) -> None:
        site, gw, nic = self.site, self.site.gateway_ns, self.site.gateway_nic
        if site.is_cloud:
            assert site.vpc_ns is not None and site.router_ip is not None
            veth(site.vpc_ns, BRIDGE_GW_PORT, gw, nic, site.nic_mtu)
            plug_cloud_gateway(site)
            ip(gw, "address", "add", site.gateway_ip, "dev", nic)
            ip(gw, "route", "add", "default", "via", site.router_ip.ip)
        else:
            veth(self.plan.internet_ns, site.internet_if, gw, nic, site.uplink_mtu)
            plug_static_gateway(self.plan, site)
            ip(gw, "address", "add", f"{site.public_ip}/32", "dev", nic)
            ip(gw, "route", "add", site.transit_internet.ip, "dev", nic, "scope", "link")
            ip(gw, "route", "add", "default", "via", site.transit_internet.ip, "dev", nic)
            if site.single_host:  # no LAN: it is the workload; forwarding off, as on a fresh server
                sysctl(gw, "net.ipv4.ip_forward=0")
            else:
                veth(gw, GW_LAN, site.host_ns, NIC, site.nic_mtu)
                ip(gw, "address", "add", site.gateway_ip, "dev", GW_LAN)
        self.plugged = True

    def start(self) -> None:
        with self.log_path.open("a") as log:
            self._node = start_holder(self.state, self.site.gateway_ns, log)
        self.write_files()
        if any(s.dns_name for s in self.plan.sites):  # its resolver: the lab's, in its private /etc only
            write_resolv_conf(self.node.path("/etc/resolv.conf"))
        if self.provisioner is not None:
            self.provisioner.provision_network(self.site.name, self.site.gateway_ns)
            self.provisioner.provision_files(self.site.name, self.node.path)
        for step in self.setup.steps:
            if step.kind == "sysctl" and step.argv:
                self.node.run(["sysctl", "-q", "-w", *step.argv])
            elif step.kind == "chmod":
                assert step.path is not None
                os.chmod(self.node.path(str(step.path)), step.mode)
            elif step.kind == "install-dir":
                assert step.path is not None
                self.node.path(str(step.path)).mkdir(parents=True, exist_ok=True)
                os.chmod(self.node.path(str(step.path)), step.mode)
            elif step.kind == "wg-quick":
                self.state.interfaces.setdefault(self.site.gateway_ns, []).append(step.argv[0])
                self.state.save()
                self.wg_quick("up", step.argv[0])
            elif step.kind == "agent-once":
                self.agent_once(step)
            elif step.kind == "service":
                self.agent_service(step)
            elif step.kind == "timer":
                self.timer(step)

    def unit_env(self, step: cloudinit.Step) -> dict[str, str]:
        """The agent's environment: systemd's PATH, its environment files as they are in the gateway now (the unit's
        EnvironmentFile, or what its --once script sources), then its own variables (what the lab's own process
        has, a venv, never leaks in)."""
        env = {"PATH": SYSTEMD_PATH, "PYTHONPATH": "", "VIRTUAL_ENV": "", "PYTHONHOME": ""}
        for path, optional in step.env_files:
            file = self.node.path(str(path))
            if not file.exists():
                if optional:
                    continue
                raise LabError(f"{self.site.name}: the agent's environment file {path} does not exist")
            env.update(cloudinit.parse_env_file(file.read_text()))
        env.update(dict(step.env))
        return env

    def unit_directories(self, step: cloudinit.Step) -> None:
        """What systemd makes before a unit's ExecStart: its StateDirectory= and RuntimeDirectory= (0755, root)."""
        for directory in step.unit.directories if step.unit is not None else ():
            self.node.path(str(directory)).mkdir(mode=0o755, parents=True, exist_ok=True)

    def agent_once(self, step: cloudinit.Step) -> None:
        """cloud-init's `... agent --once`: one document fetched and applied before wg-quick starts.

        Its environment file: what its `sh -c` sources (as cloud-init runs it), or, for a bare command, the agent
        unit's EnvironmentFile (a deviation: cloud-init would not read it, but the lab's clouds are reachable only
        through those overrides; a booted gateway needs the first form). Commands before it (`bootstrap && agent`:
        an AWS gateway installs the agent's package first) run with the same environment and must succeed."""
        for argv in step.before:
            result = self.node.run(list(argv), env=self.unit_env(step), check=False, timeout=AGENT_ONCE_TIMEOUT_S)
            output = redact_keys(result.stdout + result.stderr)
            self.log(f"$ {' '.join(argv)}\n{output}")
            if result.returncode != 0:
                tail = " / ".join(output.strip().splitlines()[-3:])
                raise LabError(
                    f"{self.site.name}: {argv[2]} failed ({result.returncode}): {tail} (log: {self.log_path})"
                )
        result = self.node.run(list(step.argv), env=self.unit_env(step), check=False, timeout=AGENT_ONCE_TIMEOUT_S)
        output = redact_keys(result.stdout + result.stderr)
        self.log(f"$ {' '.join(step.argv)}\n{output}")
        if result.returncode != 0:
            tail = " / ".join(output.strip().splitlines()[-3:])
            code = result.returncode
            raise LabError(f"{self.site.name}: the agent's --once failed ({code}): {tail} (log: {self.log_path})")

    def agent_service(self, step: cloudinit.Step) -> None:
        """`systemctl enable --now` of the agent's unit (or of a script's: wg-mesh-rearm): its ExecStart as a daemon the
        lab tracks by pid."""
        assert step.unit is not None
        self.unit_directories(step)
        with self.log_path.open("a") as log:
            log.write(f"$ {' '.join(step.argv)}   # {step.unit.name}\n")
            log.flush()
            proc = self.node.popen(list(step.argv), stdout=log, env=self.unit_env(step))
        self.state.track(proc.pid, self.site.gateway_ns, step.unit.name)
        self.daemons.append(proc)

    def timer(self, step: cloudinit.Step) -> None:
        """A timer's oneshot service (cloudinit.TIMED_UNITS): its ExecStart now and again `every` seconds after each
        run, in a loop the lab tracks by pid (a namespace has no systemd)."""
        assert step.unit is not None
        self.unit_directories(step)
        loop = ["sh", "-c", f'while :; do "$@"; sleep {step.every}; done', step.unit.name, *step.argv]
        with self.log_path.open("a") as log:
            log.write(f"$ {' '.join(step.argv)}   # {step.unit.name}, every {step.every} s\n")
            log.flush()
            proc = self.node.popen(loop, stdout=log, env=self.unit_env(step))
        self.state.track(proc.pid, self.site.gateway_ns, f"{step.unit.name} (timer)")
        self.daemons.append(proc)

    def write_files(self) -> None:
        for f in self.setup.files:
            path = self.node.path(str(f.path))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, f.mode)
            with os.fdopen(fd, "wb") as out:
                os.fchmod(out.fileno(), f.mode)
                out.write(f.content)

    def wg_quick(self, verb: str, interface: str) -> None:
        """The real wg-quick in the gateway's namespaces; its output goes to the gateway's log."""
        result = self.node.run(["wg-quick", verb, interface], env=WG_QUICK_ENV, check=False, timeout=30)
        output = redact_keys(result.stdout + result.stderr)
        self.log(f"$ wg-quick {verb} {interface}\n{output}")
        if result.returncode != 0:
            tail = output.strip().splitlines()[-3:]
            raise LabError(
                f"{self.site.name}: wg-quick {verb} {interface} failed: {' / '.join(tail)} (log: {self.log_path})"
            )
        if verb == "up":
            self.state.track_namespace_processes(self.node.netns, "wireguard-go")

    def tunnel(self, verb: str) -> None:
        self.wg_quick(verb, INTERFACE)
