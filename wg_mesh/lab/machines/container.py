"""`--boot`: a gateway as a systemd-nspawn container booted from the lab's Debian image, with its rendered user
data as the NoCloud seed; systemd and cloud-init carry it out.

How it runs here (a host without systemd, D-Bus or udev, with hybrid cgroups):
* `systemd-nspawn --boot --register=no --keep-unit` (without --keep-unit it wants the system bus),
  `--console=read-only`, `SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1` (a pure cgroup v2 container like Ubuntu 24.04),
  started from its own cgroup (`nspawn.make_cgroup`);
* `--private-network --network-veth-extra=HOST:NIC`: nspawn makes the veth (a prepared one is refused "not
  initialized yet" without udev). nspawn runs inside the lab namespace where the NIC belongs (the VPC's, or
  the internet's for a VPS) via `nsenter --net`, so the host end is created there, never in the host's
  namespace (`ip netns exec` would hide /sys/fs/cgroup behind a fresh sysfs);
* the root is an overlay of the shared image, the seed and the package source are read-only binds,
  /dev/net/tun is bound for wireguard-go; the container's netns gets the plan's gateway name
  (`ip netns attach`) so that the checks address it like any other gateway.
A container reaches only the lab's networks: its NICs are its only links, and the package source is a file tree.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from wg_mesh.lab.fabric.netns import STATE_DIR, LabError, LabState, Node, netns_id, proc_start_time, run, tool_env
from wg_mesh.lab.fabric.networks import build_host, ip, plug_cloud_gateway, plug_static_gateway
from wg_mesh.lab.fabric.nspawn import cgroup_path, container_leader, join_cgroup
from wg_mesh.lab.fabric.plan import BRIDGE_GW_PORT, GW_LAN, NIC, GatewayArtifacts, LabPlan, SitePlan
from wg_mesh.lab.machines import seed
from wg_mesh.lab.machines.image import REPO_MOUNT, Image
from wg_mesh.lab.machines.machine import GatewayMachine
from wg_mesh.plan.render import INTERFACE

NSPAWN_ENV = {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
SEED_MOUNT = "/var/lib/cloud/seed/nocloud"
REBOOT_EXIT = 133  # systemd-nspawn's exit status when the container rebooted
BOOT_TIMEOUT = 300.0
WG_UNIT = f"wg-quick@{INTERFACE}"


class ContainerGateway(GatewayMachine):
    kind = "container"
    names_netns = True  # the container's own netns takes the plan's gateway name; the lab creates none

    def __init__(
        self, plan: LabPlan, site: SitePlan, artifacts: GatewayArtifacts, state: LabState, *, image: Image, repo: Path
    ) -> None:
        super().__init__(plan, site, artifacts, state)
        if site.single_host:
            raise LabError(f"{site.name} is a single host (no cidrs): the namespace lab runs it; --boot does not yet")
        named = [s.name for s in plan.sites if s.dns_name]
        if named:  # its peers' resolv.conf must name the lab's resolver (resolver.py): a namespace gateway's does
            raise LabError(f"{named[0]} is DNS-named: the namespace lab runs it; --boot does not yet")
        self.image = image
        self.repo = repo
        self.dir = STATE_DIR / f"{plan.prefix}.machines" / site.name
        self.root = self.dir / "root"
        self.proc: subprocess.Popen[bytes] | None = None
        self.launched_at: float | None = None  # wall clock, for boot-to-handshake
        self.cloud_init_s: float | None = None  # launch to `cloud-init status --wait` returning
        self.cloud_init_exit: int | None = None
        self.cgroup = cgroup_path(f"{plan.prefix}-{site.name}")

    # --- where nspawn runs and what it creates -------------------------------------------------

    @property
    def fabric_ns(self) -> str:
        """The lab namespace that holds the fabric end of the gateway's first NIC."""
        return self.site.vpc_ns if self.site.vpc_ns is not None else self.plan.internet_ns

    @property
    def lan_port(self) -> str:
        return f"lan{self.site.index}"

    def veth_extras(self) -> list[str]:
        site = self.site
        if site.is_cloud:
            return [f"{BRIDGE_GW_PORT}:{site.gateway_nic}"]
        return [f"{site.internet_if}:{site.gateway_nic}", f"{self.lan_port}:{GW_LAN}"]

    def record(self) -> dict[str, Any]:
        return self.state.containers.setdefault(self.site.name, {})

    # --- GatewayMachine -----------------------------------------------------------------------

    def attach(self, later: bool = False) -> None:
        self.prepare()
        if not later:  # booting now, in parallel with the others; start() waits for it
            self.launch_provisioned()
            self.plug(first=True)

    def start(self) -> None:
        if self.proc is None:  # attached for later (the drill's added site): boots now
            self.launch_provisioned()
            self.plug(first=False)
        self.wait_running()
        if self.provisioner is not None:
            self.provisioner.provision_network(self.site.name, self.site.gateway_ns)
            self.provisioner.provision_files(self.site.name, self.node.path)  # what was published since the launch
        result = self.node.run(["cloud-init", "status", "--wait"], check=False, timeout=BOOT_TIMEOUT)
        assert self.launched_at is not None
        self.cloud_init_s = round(time.time() - self.launched_at, 2)
        self.cloud_init_exit = result.returncode
        self.log(f"$ cloud-init status --wait (exit {result.returncode}, {self.cloud_init_s} s after launch)\n")

    def cloud_init_status(self) -> dict[str, Any]:
        out = self.node.run(["cloud-init", "status", "--long", "--format", "json"], check=False, timeout=30).stdout
        try:
            doc: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError:
            return {"status": "unreadable", "errors": [out.strip()[-300:]], "recoverable_errors": {}}
        return doc

    def settled_cloud_init_status(self, timeout: float) -> tuple[dict[str, Any], float]:
        """cloud-init's status once it has finished this boot (its stages run at every boot, and wg0 can be up
        before cloud-final is done), and the milliseconds that took; "running" still after `timeout` s."""
        began = time.monotonic()
        while True:
            status = self.cloud_init_status()
            if status.get("status") not in ("running", "not started") or time.monotonic() - began > timeout:
                return status, round((time.monotonic() - began) * 1000, 1)
            time.sleep(0.2)

    def tunnel_failed_since(self) -> float | None:
        """When wg-quick@wg0 failed (unix time), None while it has not. Once cloud-init is done (start() waits for
        it) nothing the user data sets up starts a failed wg0 again (the unit has no Restart=; the agent only changes
        a running wg0), so a wait for that gateway's handshakes or for its metrics to show wg0 up can stop."""
        argv = ["systemctl", "show", "--timestamp=unix", "-p", "ActiveState,StateChangeTimestamp", WG_UNIT]
        out = self.node.run(argv, check=False, timeout=15).stdout
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if props.get("ActiveState") != "failed":
            return None
        return float(props.get("StateChangeTimestamp", "").lstrip("@") or 0)

    def tunnel(self, verb: str) -> None:
        action = {"down": "stop", "up": "start"}[verb]
        result = self.node.run(["systemctl", action, WG_UNIT], check=False, timeout=60)
        self.log(f"$ systemctl {action} {WG_UNIT} -> {result.returncode}\n{result.stdout}{result.stderr}")
        if result.returncode != 0:
            raise LabError(f"{self.site.name}: systemctl {action} {WG_UNIT} failed: {result.stderr.strip()[-300:]}")

    # --- steps --------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Overlay root on the image, the image's cloud-specific files, the NoCloud seed (0700: it holds the key)."""
        record = self.record()
        record.update(dir=str(self.dir), root=str(self.root), cgroup=str(self.cgroup))
        self.state.save()
        self.cgroup.mkdir(parents=True, exist_ok=True)
        for sub in ("upper", "work", "root"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={self.image.root},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}"
        run(["mount", "-t", "overlay", "-o", options, "wg-mesh-lab", str(self.root)])
        for path, text in seed.image_files(self.site).items():
            target = self.root / str(path).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        nocloud = self.dir / "seed"
        nocloud.mkdir(mode=0o700, exist_ok=True)
        (nocloud / "user-data").write_text(self.artifacts.user_data)
        (nocloud / "meta-data").write_text(seed.meta_data(self.plan, self.site))
        (nocloud / "network-config").write_text(seed.network_config_text(self.site))

    def launch_provisioned(self) -> None:
        """`delivery: live`: the files the instance finds on its disk are in its root before it boots (the agent's
        EnvironmentFile: cloud-init's `--once` sources it; a static site's document and key)."""
        if self.provisioner is not None:
            self.provisioner.provision_files(self.site.name, lambda inside: self.root / inside.lstrip("/"))
        self.launch()

    def launch(self) -> None:
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.fabric_ns}",
            "--",
            "systemd-nspawn",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=read-only",
            f"--directory={self.root}",
            f"--machine={self.plan.prefix}-{self.site.name}",
            f"--hostname={self.site.name}",
            "--private-network",
            *(f"--network-veth-extra={pair}" for pair in self.veth_extras()),
            f"--bind-ro={self.dir / 'seed'}:{SEED_MOUNT}",
            f"--bind-ro={self.repo}:{REPO_MOUNT}",
            "--bind=/dev/net/tun",
        ]
        console = (self.state.log_dir / f"{self.site.name}.console.log").open("ab")
        cgroup = self.cgroup
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            env=tool_env(NSPAWN_ENV),
            start_new_session=True,
            preexec_fn=lambda: join_cgroup(cgroup),
        )
        console.close()
        self.launched_at = time.time()
        record = self.record()
        record.update(pid=self.proc.pid, start=proc_start_time(self.proc.pid), netns=self.fabric_ns)
        self.state.save()
        self._node = None

    def _wait_link(self, netns: str, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if run(["ip", "-n", netns, "link", "show", name], check=False).returncode == 0:
                return
            self._check_alive()
            time.sleep(0.05)
        raise LabError(f"{self.site.name}: systemd-nspawn did not create {name} in {netns} (see {self.console_log})")

    def plug(self, first: bool) -> None:
        """Wire the NICs nspawn made into the fabric (again after every boot: each boot makes new ones)."""
        site = self.site
        if site.is_cloud:
            assert site.vpc_ns is not None
            self._wait_link(site.vpc_ns, BRIDGE_GW_PORT)
            plug_cloud_gateway(site)
            self.plugged = True
            return
        inet = self.plan.internet_ns
        self._wait_link(inet, site.internet_if)
        self._wait_link(inet, self.lan_port)
        plug_static_gateway(self.plan, site)
        ip(inet, "link", "set", self.lan_port, "netns", site.host_ns)
        ip(site.host_ns, "link", "set", self.lan_port, "name", NIC, "mtu", site.nic_mtu, "up")
        if not first:
            build_host(site)  # the LAN is a new link: the host's address and routes went with the old one
        self.plugged = True

    @property
    def console_log(self) -> Path:
        return self.state.log_dir / f"{self.site.name}.console.log"

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.console_log.read_text(errors="replace").strip().splitlines()[-3:]
            raise LabError(f"{self.site.name}: systemd-nspawn exited ({self.proc.returncode}): {' / '.join(tail)}")

    def wait_running(self, timeout: float = 60.0) -> None:
        """Wait for the container's PID 1, then give its netns the plan's gateway name."""
        deadline = time.monotonic() + timeout
        leader = None
        while leader is None and time.monotonic() < deadline:
            self._check_alive()
            leader = container_leader(self.cgroup)
            if leader is None:
                time.sleep(0.05)
        if leader is None:
            raise LabError(f"{self.site.name}: the container's init did not start (see {self.console_log})")
        gw = self.site.gateway_ns
        if netns_id(gw) is not None:
            run(["ip", "netns", "delete", gw])
        run(["ip", "netns", "attach", gw, str(leader)])
        self.record().update(leader=leader)
        self.state.save()
        self._node = Node(gw, leader, container=True)
        # systemctl answers once PID 1 has its private socket.
        while time.monotonic() < deadline:
            if self.node.run(["systemctl", "is-system-running"], check=False, timeout=10).stdout.strip():
                return
            time.sleep(0.1)
        raise LabError(f"{self.site.name}: systemd in the container did not answer")

    def reboot(self, timeout: float = 120.0) -> dict[str, float]:
        """`systemctl reboot` inside; nspawn exits 133 and is started again on the same root (as a VM's disk
        survives a reboot). Returns milliseconds from the reboot to: nspawn's exit, PID 1, wg0 active."""
        assert self.proc is not None
        began = time.monotonic()
        self.node.run(["systemctl", "reboot"], check=False, timeout=30)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"{self.site.name}: did not reboot within {timeout:.0f} s") from exc
        down = time.monotonic()
        if code != REBOOT_EXIT:
            raise LabError(f"{self.site.name}: systemd-nspawn exited {code} on reboot, not {REBOOT_EXIT}")
        self.launch()
        self.plug(first=False)
        self.wait_running()
        if self.provisioner is not None:  # a new netns: GCP's metadata server again
            self.provisioner.provision_network(self.site.name, self.site.gateway_ns)
        running = time.monotonic()
        deadline = running + timeout
        while time.monotonic() < deadline:
            if self.node.run(["systemctl", "is-active", "--quiet", WG_UNIT], check=False).returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise LabError(f"{self.site.name}: {WG_UNIT} not active {timeout:.0f} s after the reboot")
        up = time.monotonic()

        def ms(t: float) -> float:
            return round((t - began) * 1000, 1)

        return {"shutdown_ms": ms(down), "pid1_ms": ms(running), "wg_active_ms": ms(up)}
