"""The lab's primitives: commands in network namespaces, gateway mount namespaces, tracked processes,
the state file, and ending processes by pid (teardown.py removes a whole lab with them).

Nothing here ever looks a process up by name. A process is ours if it lives in one of our namespaces
(`<prefix>-...`), or if the state file recorded it and it still has the same start time and netns.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

STATE_DIR = Path("/run/wg-mesh-lab")
NETNS_DIR = Path("/run/netns")
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
REQUIRED_TOOLS = ("ip", "iptables", "wg", "wg-quick", "wireguard-go", "iperf3", "ping", "nstat", "nsenter", "sysctl")
WG_QUICK_ENV = {"WG_QUICK_USERSPACE_IMPLEMENTATION": "wireguard-go"}

Log = Callable[[str], None]


class LabError(RuntimeError):
    """The lab could not be built or run (not a failed check: a broken environment or command)."""


class CommandError(LabError):
    def __init__(self, argv: Sequence[str], returncode: int, output: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        super().__init__(f"`{' '.join(argv)}` failed ({returncode}): {output.strip()[-400:]}")


def tool_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the tools: sbin on PATH (sudo and test runners often drop it), C locale."""
    env = dict(os.environ)
    path = env.get("PATH", "/usr/bin:/bin").split(":")
    env["PATH"] = ":".join([*(d for d in SBIN_DIRS if d not in path), *path])
    env["LC_ALL"] = "C"
    env.update(extra or {})
    return env


def missing_requirements() -> list[str]:
    """Why the lab cannot run here (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root (network namespaces, veths, iptables): run it with sudo")
    path = tool_env()["PATH"]
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool, path=path) is None]
    if missing:
        problems.append(
            f"missing tools: {', '.join(missing)} (Debian/Ubuntu: apt-get install iproute2 iptables "
            "wireguard-tools wireguard-go iperf3 iputils-ping util-linux procps)"
        )
    if not Path("/dev/net/tun").exists():
        problems.append("no /dev/net/tun (wireguard-go needs the tun driver)")
    return problems


def run(
    argv: Sequence[str],
    *,
    timeout: float = 30.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            list(argv),
            input=stdin_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=tool_env(env),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:.0f} s") from exc
    if check and result.returncode != 0:
        raise CommandError(argv, result.returncode, result.stderr or result.stdout)
    return result


# --- processes and namespaces, identified by /proc ----------------------------------------------


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the pid, it identifies a process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has finished: nothing left to stop
        return None
    return int(fields[19])


def _ns_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def netns_id(name: str) -> tuple[int, int] | None:
    return _ns_id(NETNS_DIR / name)


def pid_netns_id(pid: int) -> tuple[int, int] | None:
    return _ns_id(f"/proc/{pid}/ns/net")


def pids_in_netns(name: str) -> list[int]:
    """Every process living in the named network namespace (what `ip netns pids` prints)."""
    target = netns_id(name)
    if target is None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and pid_netns_id(int(entry)) == target and proc_start_time(int(entry)) is not None:
            pids.append(int(entry))
    return pids


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


# --- the state file --------------------------------------------------------------------------------


@dataclass
class Tracked:
    pid: int
    start: int
    netns: str
    netns_id: tuple[int, int]
    what: str

    def still_ours(self) -> bool:
        return proc_start_time(self.pid) == self.start and pid_netns_id(self.pid) == tuple(self.netns_id)


@dataclass
class LabState:
    """What a running (or kept, or crashed) lab holds; written before anything is created."""

    prefix: str
    owner_pid: int
    owner_start: int
    label: str = ""
    # The process that started the owner (its parent: a shell, a test), pid and start time. Only a fact about
    # who asked for the lab: `lab down` never reads it; a test's cleanup removes the labs its own process launched.
    launcher_pid: int = 0
    launcher_start: int = 0
    created: float = field(default_factory=time.time)
    namespaces: list[str] = field(default_factory=list)
    processes: list[Tracked] = field(default_factory=list)
    holders: dict[str, int] = field(default_factory=dict)  # gateway netns -> holder pid
    interfaces: dict[str, list[str]] = field(default_factory=dict)  # gateway netns -> wg-quick interfaces
    # site -> booted gateway (--boot): systemd-nspawn pid and start time, its cgroup, overlay root, directory
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.prefix}.json"

    @property
    def log_dir(self) -> Path:
        return STATE_DIR / self.prefix

    @property
    def containers_path(self) -> Path:
        """The booted gateways' records, beside the state file: a wg-mesh that predates --boot still reads the
        state file itself (and so leaves a running lab alone instead of taking it for an unreadable, dead one)."""
        return STATE_DIR / f"{self.prefix}.containers.json"

    def save(self) -> None:
        STATE_DIR.mkdir(mode=0o755, exist_ok=True)
        data = asdict(self)
        for path, content in ((self.containers_path, data.pop("containers")), (self.path, data)):
            if path == self.containers_path and not content:
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(content, indent=1))
            tmp.chmod(0o600)
            tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> LabState:
        data: dict[str, Any] = json.loads(path.read_text())
        data["processes"] = [Tracked(**{**p, "netns_id": tuple(p["netns_id"])}) for p in data.get("processes", [])]
        state = cls(**data)
        if state.containers_path.exists():
            state.containers = json.loads(state.containers_path.read_text())
        return state

    def remove(self) -> None:
        self.containers_path.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)

    def owner_alive(self) -> bool:
        return self.owner_pid > 0 and proc_start_time(self.owner_pid) == self.owner_start

    def launched_by(self, pid: int) -> bool:
        """Whether the running process `pid` started this lab's owner."""
        return self.launcher_pid == pid > 0 and proc_start_time(pid) == self.launcher_start

    def track(self, pid: int, netns: str, what: str) -> None:
        start, nsid = proc_start_time(pid), pid_netns_id(pid)
        if start is not None and nsid is not None and not any(p.pid == pid for p in self.processes):
            self.processes.append(Tracked(pid, start, netns, nsid, what))
            self.save()

    def track_namespace_processes(self, netns: str, what: str) -> None:
        """Record processes that appeared in a namespace without being our children (daemons)."""
        for pid in pids_in_netns(netns):
            self.track(pid, netns, what)


def new_state(prefix: str, label: str) -> LabState:
    me, parent = os.getpid(), os.getppid()
    return LabState(
        prefix=prefix, owner_pid=me, owner_start=proc_start_time(me) or 0, label=label,
        launcher_pid=parent, launcher_start=proc_start_time(parent) or 0,
    )  # fmt: skip


# --- command contexts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """Where a command runs: a network namespace, plus a gateway's own mount namespace if it has one, or a
    booted container (`holder` is then its PID 1, and commands join all of its namespaces)."""

    netns: str
    holder: int | None = None
    container: bool = False

    def wrap(self, argv: Sequence[str]) -> list[str]:
        if self.holder is not None and self.container:
            # --pid too (systemctl and cloud-init want to run inside the container's pid namespace); nsenter then
            # forks the command into it, so a started process is stopped by its process group (procs.stop).
            joined = ("--mount", "--uts", "--ipc", "--net", "--pid")
            return ["nsenter", f"--target={self.holder}", *joined, "--", *argv]
        if self.holder is not None:
            return ["nsenter", f"--target={self.holder}", "--mount", "--net", "--", *argv]
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run(self.wrap(argv), **kwargs)

    def popen(self, argv: Sequence[str], *, stdout: IO[Any] | int | None, env: Mapping[str, str] | None = None) -> Any:
        return subprocess.Popen(
            self.wrap(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
            env=tool_env(env),
            start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop these in order
        )

    def path(self, inside: str) -> Path:
        """A path inside this node's mount namespace, reachable from the host through /proc."""
        if self.holder is None:
            return Path(inside)
        return Path(f"/proc/{self.holder}/root") / inside.lstrip("/")


# A gateway's private view of the file system: a fresh /run (wireguard-go's sockets, /var/run/wireguard,
# are otherwise shared by every namespace) and copy-on-write /etc and /usr/local for the files cloud-init
# writes, and /var/lib for what the gateway's agent keeps (its state, its node-exporter textfile). The overlays'
# upper layers live in that /run: in memory, gone with the namespace.
HOLDER_SCRIPT = """set -e
mount -t tmpfs -o mode=0755,size=64m wg-mesh-lab-run /run
mkdir -p /run/wireguard
for dir in /etc /usr/local /var/lib; do
  layer=/run/.wg-mesh-lab$(echo "$dir" | tr / -)
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" wg-mesh-lab "$dir"
done
echo ready
exec sleep infinity
"""


def start_holder(state: LabState, netns: str, log: IO[str]) -> Node:
    """A process that owns the gateway's mount namespace (inside its netns); commands join it with nsenter."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", netns, "sh", "-c", HOLDER_SCRIPT],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=tool_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # the script either prints 'ready' or exits (EOF)
    proc.stdout.close()
    if line != "ready":
        proc.wait(timeout=5)
        raise LabError(f"could not set up the mount namespace of {netns} (see {log.name})")
    state.track(proc.pid, netns, "mount-namespace holder")
    state.holders[netns] = proc.pid
    state.save()
    return Node(netns, proc.pid)


# --- teardown --------------------------------------------------------------------------------------------


def _wait_gone(pids: Iterable[int], starts: Mapping[int, int | None], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        left = [pid for pid in left if proc_start_time(pid) is not None and proc_start_time(pid) == starts[pid]]
        if left:
            time.sleep(0.02)
    return left


def stop_pids(pids: Iterable[int], timeout: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL what is left; returns pids that still would not go."""
    starts = {pid: proc_start_time(pid) for pid in set(pids)}
    alive = [pid for pid, start in starts.items() if start is not None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        alive = _wait_gone(alive, starts, timeout)
        if not alive:
            break
    return alive
