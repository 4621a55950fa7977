"""The checks only a booted gateway can answer (`--boot`), after the six the lab always runs.

7. cloud_init  `cloud-init status --long` is done, with no errors and no recoverable errors, on every gateway;
               boot-to-done and boot-to-handshake times
8. units       every unit the user data enables, starts or restarts is active; the running agent cannot write
               agent.json (its unit mounts it read-only: a write from inside its mount namespace fails)
9. files       the modes the user data asks for, and /etc/wireguard 0700
10. packages   apt's only source is the lab's local one and the lab has no route out; nothing came in through
               Recommends/Suggests (apt's autoremove with both unimportant)
11. metrics    the metrics file exists and node-exporter serves the wgmesh_* series (wg0 up, every peer)
12. sysctl     render.SYSCTL_SETTINGS in effect, also over a GCE-style 60-gce-network-security.conf (GCP)
13. reboot     one gateway reboots: wg0 comes back through systemd, cloud-init does not run again, traffic flows
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

from wg_mesh.lab.checks.outage import measure_outage
from wg_mesh.lab.checks.result import CheckResult, LabOptions, main_pair, ok_text, timed
from wg_mesh.lab.fabric.netns import run
from wg_mesh.lab.fabric.plan import LabKeys
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.lab.machines.container import ContainerGateway
from wg_mesh.lab.machines.image import REPO_MOUNT
from wg_mesh.lab.machines.seed import GCE_SYSCTL_PATH, user_data_facts
from wg_mesh.plan import metrics, render
from wg_mesh.plan.render import INTERFACE

TITLES = {
    "cloud_init": "7. cloud-init on every gateway",
    "units": "8. Units the user data enables are active",
    "files": "9. File modes",
    "packages": "10. Packages: from the local source only, nothing through Recommends",
    "metrics": "11. Metrics file and node-exporter",
    "sysctl": "12. Sysctls in effect",
    "reboot": "13. Reboot of a gateway",
}
# cloud-init's record of what ran once per instance: unchanged by a reboot when it does not run again.
INSTANCE_SEMAPHORES = "/var/lib/cloud/instance/sem"


def machines(lab: BuiltLab) -> list[ContainerGateway]:
    found = [m for m in lab.machines.values() if isinstance(m, ContainerGateway)]
    assert len(found) == len(lab.machines), "boot checks need booted gateways"
    return found


def boot_handshakes(lab: BuiltLab, keys: LabKeys, timeout: float = 30.0) -> dict[str, float | None]:
    """Per gateway: seconds from its container's launch until it had a handshake with every peer (wg's
    handshake times have 1 s resolution). Taken right after the boot, before any check restarts a tunnel. None for
    every gateway still waiting once one's wg0 has failed: it stays down, so no other gateway completes its set."""
    names = {public: site for site, public in keys.public.items()}
    peers = len(lab.plan.sites) - 1
    times: dict[str, float | None] = {m.site.name: None for m in machines(lab)}
    deadline = time.monotonic() + timeout
    while True:
        for m in machines(lab):
            if times[m.site.name] is not None:
                continue
            out = m.node.run(["wg", "show", INTERFACE, "latest-handshakes"], check=False, timeout=10).stdout
            epochs = [int(e) for k, _, e in (line.partition("\t") for line in out.splitlines()) if k.strip() in names]
            if len(epochs) == peers and all(epochs):
                assert m.launched_at is not None
                times[m.site.name] = round(max(epochs) - m.launched_at, 1)
        if all(t is not None for t in times.values()) or time.monotonic() > deadline:
            return times
        if any(m.tunnel_failed_since() is not None for m in machines(lab) if times[m.site.name] is None):
            return times
        time.sleep(0.2)


def check_cloud_init(lab: BuiltLab, handshakes: dict[str, float | None]) -> CheckResult:
    rows, data = [], {}
    for m in machines(lab):
        doc = m.cloud_init_status()
        errors = list(doc.get("errors") or [])
        recoverable = {k: v for k, v in (doc.get("recoverable_errors") or {}).items() if v}
        ok = doc.get("status") == "done" and not errors and not recoverable
        data[m.site.name] = {
            "ok": ok,
            "status": doc.get("status"),
            "errors": errors,
            "recoverable_errors": recoverable,
            "boot_to_cloud_init_done_s": m.cloud_init_s,
            "boot_to_handshake_s": handshakes[m.site.name],
        }
        problems = "; ".join([*errors, *(f"{k}: {v}" for k, v in recoverable.items())]) or "none"
        hs = handshakes[m.site.name]
        rows.append(
            [m.site.name, str(doc.get("status")), problems[:160], f"{m.cloud_init_s}", "-" if hs is None else f"{hs}"]
        )
    ok = all(d["ok"] for d in data.values())
    failed = [site for site, d in data.items() if not d["ok"]]
    summary = "done without errors on every gateway" if ok else f"cloud-init reports a problem on {', '.join(failed)}"
    return CheckResult(
        "cloud_init",
        TITLES["cloud_init"],
        ok,
        summary,
        ["gateway", "status", "errors", "boot to done s", "boot to handshakes s"],
        rows,
        {"gateways": data},
    )


def unit_state(m: ContainerGateway, unit: str) -> tuple[str, bool]:
    """('active' / 'ran once' / the state, ok): a oneshot service the user data started has run and exited."""
    out = m.node.run(["systemctl", "show", "-p", "Type,ActiveState,Result", unit], check=False, timeout=15).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("ActiveState") == "active":
        return "active", True
    ran = props.get("ActiveState") in ("inactive", "activating")  # a timer may be running it again right now
    if props.get("Type") == "oneshot" and ran and props.get("Result") == "success":
        return "ran (oneshot, success)", True
    return f"{props.get('ActiveState', '?')} ({props.get('Result', '?')})", False


def anchor_state(m: ContainerGateway) -> tuple[str, bool]:
    """Whether agent.json is read-only to the running agent: an append-open of it (writes nothing) in its namespace."""
    pid = "$(systemctl show -p MainPID --value wg-mesh-agent.service)"
    opened = f"nsenter -t {pid} -m -- sh -c ': >> /etc/wg-mesh/agent.json'"
    done = m.node.run(["sh", "-c", opened], check=False, timeout=15)
    return ("read-only to the agent", True) if "Read-only file system" in done.stderr else ("WRITABLE", False)


def check_units(lab: BuiltLab) -> CheckResult:
    rows, data, ok = [], {}, True
    for m in machines(lab):
        units = user_data_facts(m.artifacts.user_data).units
        states = {unit: unit_state(m, unit) for unit in units}
        if "wg-mesh-agent.service" in states:  # issue 33 item 4: the trust anchor out of the agent's reach
            states["wg-mesh-agent.service: agent.json"] = anchor_state(m)
        failed = m.node.run(["systemctl", "list-units", "--failed", "--plain", "--no-legend"], check=False).stdout
        data[m.site.name] = {
            "units": {unit: state for unit, (state, _) in states.items()},
            "failed_units": [line.split()[0] for line in failed.splitlines() if line.strip()],
        }
        ok = ok and bool(units) and all(good for _, good in states.values())
        rows += [[m.site.name, unit, state, ok_text(good)] for unit, (state, good) in states.items()]
    failed_any = sorted({u for d in data.values() for u in d["failed_units"]})
    summary = "every unit active" if ok else "a unit the user data set up is not active"
    if failed_any:
        summary += f" (failed units on some gateway: {', '.join(failed_any)})"
    return CheckResult(
        "units", TITLES["units"], ok, summary, ["gateway", "unit", "state", ""], rows, {"gateways": data}
    )


def check_files(lab: BuiltLab) -> CheckResult:
    rows, data = [], {}
    for m in machines(lab):
        expected = user_data_facts(m.artifacts.user_data).modes
        out = m.node.run(["stat", "-c", "%a %n", *expected], check=False, timeout=10).stdout
        actual = {name: int(mode, 8) for mode, name in (line.split(" ", 1) for line in out.splitlines())}
        data[m.site.name] = {
            p: {"expected": oct(e), "actual": oct(actual[p]) if p in actual else None} for p, e in expected.items()
        }
        for path, mode in expected.items():
            got = actual.get(path)
            rows.append(
                [m.site.name, path, oct(mode)[2:], "missing" if got is None else oct(got)[2:], ok_text(got == mode)]
            )
    ok = all(v["expected"] == v["actual"] for d in data.values() for v in d.values())
    summary = (
        "every mode as asked" if ok else "modes differ from what the user data asks (or /etc/wireguard is not 0700)"
    )
    return CheckResult(
        "files", TITLES["files"], ok, summary, ["gateway", "path", "expected", "actual", ""], rows, {"gateways": data}
    )


def image_packages(m: ContainerGateway) -> set[str]:
    status = (m.image.root / "var/lib/dpkg/status").read_text()
    return {line.split(": ", 1)[1] for line in status.splitlines() if line.startswith("Package: ")}


def check_packages(lab: BuiltLab) -> CheckResult:
    """What apt would remove if Recommends and Suggests did not keep packages: among what the user data's
    install added to the image, those are the packages that came only through them."""
    argv = [
        "apt-get",
        "-s",
        "-o",
        "APT::AutoRemove::RecommendsImportant=false",
        "-o",
        "APT::AutoRemove::SuggestsImportant=false",
        "autoremove",
    ]
    rows, data = [], {}
    for m in machines(lab):
        out = m.node.run(argv, check=False, timeout=60).stdout
        extra = sorted({line.split()[1] for line in out.splitlines() if line.startswith("Remv ")} - image_packages(m))
        listed = m.node.run(["dpkg-query", "-W", "-f", "${Package}\\n"], check=False, timeout=30).stdout.split()
        added = sorted(set(listed) - image_packages(m))
        # Where apt looked: the lab's local source is the only one (the containers have no route out of the lab).
        targets = m.node.run(["apt-get", "indextargets", "--format", "$(URI)"], check=False, timeout=30).stdout
        sources = sorted({uri.rsplit("/", 1)[0].removesuffix("/.") for uri in targets.split()})
        data[m.site.name] = {"ok": not extra, "through_recommends": extra, "installed": added, "sources": sources}
        shown = ", ".join(extra[:8]) + (" ..." if len(extra) > 8 else "")
        rows.append([m.site.name, str(len(added)), shown or "none", ok_text(not extra)])
    # TEST-NET-1 (RFC 5737): a route lookup only, nothing is sent. The lab's internet knows only the lab's networks.
    route = run(["ip", "-n", lab.plan.internet_ns, "route", "get", "192.0.2.1"], check=False)
    route_out = route.returncode == 0
    local = all(d["sources"] == [f"file:{REPO_MOUNT}"] for d in data.values())
    ok = all(d["ok"] for d in data.values()) and local and not route_out
    summary = "the user data installs only what its packages depend on, from the local source"
    if not ok:
        summary = "Recommends were installed" if not all(d["ok"] for d in data.values()) else "apt could reach out"
    return CheckResult(
        "packages",
        TITLES["packages"],
        ok,
        summary,
        ["gateway", "packages installed", "only through Recommends/Suggests", ""],
        rows,
        {"gateways": data, "route_out_of_the_lab": route_out},
    )


_SCRAPE = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


_LISTEN = re.compile(r"--web\.listen-address=(\S*):(\d+)")


def listen_address(m: ContainerGateway, port: int) -> str:
    """Where node-exporter listens, as the user data configured it (all addresses, or one, e.g. the overlay's)."""
    args = m.node.run(["cat", metrics.NODE_EXPORTER_DEFAULTS_PATH], check=False, timeout=10).stdout
    match = _LISTEN.search(args)
    host = (match.group(1) if match else "").strip("[]") or "127.0.0.1"
    return f"{host}:{match.group(2) if match else port}"


def scrape(m: ContainerGateway, port: int) -> dict[str, float]:
    url = f"http://{listen_address(m, port)}/metrics"
    out = m.node.run(["python3", "-c", _SCRAPE, url], check=False, timeout=20).stdout
    series: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith("wgmesh_"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series


def check_metrics(lab: BuiltLab, exporter_port: int, timeout: float = 30.0) -> CheckResult:
    rows, data = [], {}
    expected_peers = len(lab.plan.sites) - 1
    for m in machines(lab):
        deadline = time.monotonic() + timeout
        while True:
            has_file = m.node.run(["test", "-s", metrics.TEXTFILE_PATH], check=False).returncode == 0
            series = scrape(m, exporter_port) if has_file else {}
            up = next((v for k, v in series.items() if k.startswith("wgmesh_interface_up")), None)
            peers = next((v for k, v in series.items() if k.startswith("wgmesh_peers{")), None)
            ok = has_file and up == 1 and peers == expected_peers
            # wg0 failed (it stays down: ContainerGateway.tunnel_failed_since) and the metrics ran after that: they
            # show what they will keep showing, no need to wait for a wg0 that does not come
            failed_at = None if ok else m.tunnel_failed_since()
            ran_at = next((v for k, v in series.items() if k.startswith("wgmesh_metrics_last_run_timestamp")), None)
            settled = failed_at is not None and ran_at is not None and ran_at > failed_at
            if ok or settled or time.monotonic() > deadline:
                break
            time.sleep(1)
        data[m.site.name] = {
            "ok": ok, "file": has_file, "series": len(series), "interface_up": up, "peers": peers,
            "wg_unit_failed": failed_at is not None,
        }  # fmt: skip
        rows.append([m.site.name, ok_text(has_file), str(len(series)), str(up), str(peers), ok_text(ok)])
    ok = all(d["ok"] for d in data.values())
    summary = f"node-exporter :{exporter_port} serves wgmesh_* with wg0 up and {expected_peers} peers everywhere"
    if not ok:
        summary = "metrics missing, or they show a gateway whose tunnel is down"
    return CheckResult(
        "metrics",
        TITLES["metrics"],
        ok,
        summary,
        ["gateway", metrics.TEXTFILE_PATH, "wgmesh_* series", "interface_up", "peers", ""],
        rows,
        {"gateways": data},
    )


def read_sysctls(m: ContainerGateway) -> dict[str, str]:
    paths = ["/proc/sys/" + key.replace(".", "/") for key in render.SYSCTL_SETTINGS]
    out = m.node.run(["cat", *paths], check=False, timeout=10).stdout.split()
    return dict(zip(render.SYSCTL_SETTINGS, out, strict=False))


def check_sysctl(lab: BuiltLab) -> CheckResult:
    rows, data = [], {}
    for m in machines(lab):
        actual = read_sysctls(m)
        gce = m.node.run(["test", "-f", str(GCE_SYSCTL_PATH)], check=False).returncode == 0
        wrong = {k: actual.get(k) for k, v in render.SYSCTL_SETTINGS.items() if actual.get(k) != v}
        expect_gce = m.site.cloud == "gcp"
        ok = not wrong and gce == expect_gce
        data[m.site.name] = {"ok": ok, "actual": actual, "wrong": wrong, "gce_file": gce}
        shown = ", ".join(f"{k}={v}" for k, v in wrong.items()) or "all as rendered"
        rows.append([m.site.name, "yes" if gce else "no", shown, ok_text(ok)])
    ok = all(d["ok"] for d in data.values())
    return CheckResult(
        "sysctl",
        TITLES["sysctl"],
        ok,
        f"{len(render.SYSCTL_SETTINGS)} settings from render.SYSCTL_SETTINGS" + ("" if ok else ": some not in effect"),
        ["gateway", "GCE file in image", "settings", ""],
        rows,
        {"gateways": data, "expected": dict(render.SYSCTL_SETTINGS)},
    )


def semaphores(m: ContainerGateway) -> dict[str, str]:
    out = m.node.run(["sh", "-c", f"stat -c '%n %Y' {INSTANCE_SEMAPHORES}/*"], check=False, timeout=10).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines() if " " in line)


def check_reboot(lab: BuiltLab, options: LabOptions) -> CheckResult:
    a, b = main_pair(lab)
    machine = lab.machines[b.name]
    assert isinstance(machine, ContainerGateway)
    before = semaphores(machine)
    marks: dict[str, float] = {}

    def reboot() -> None:
        marks.update(machine.reboot(timeout=options.reboot_timeout))

    outage = measure_outage(
        lab.hosts[a.name], lab.state, a.host_ns, str(b.host_ip.ip), reboot, timeout=options.recovery_timeout
    )
    after = semaphores(machine) if outage.error is None else {}
    status, settled_ms = (
        machine.settled_cloud_init_status(options.reboot_timeout) if outage.error is None else ({}, 0.0)
    )
    rerun = sorted(k for k in before if after.get(k) != before[k])
    sysctls_ok = outage.error is None and read_sysctls(machine) == dict(render.SYSCTL_SETTINGS)
    ok = outage.ok and not rerun and bool(before) and status.get("status") == "done" and sysctls_ok
    data = {
        "gateway": b.name,
        "traffic_outage_ms": outage.outage_ms,
        **marks,
        "cloud_init_reran": rerun,
        "cloud_init_status": status.get("status"),
        "cloud_init_settled_ms": settled_ms,
        "sysctls_after_reboot": sysctls_ok,
        "error": outage.error,
    }
    rows = [
        [
            f"host {a.name} -> host {b.name}",
            f"reboot {b.name}",
            "-" if "wg_active_ms" not in marks else f"{marks['wg_active_ms']:.0f}",
            "-" if outage.outage_ms is None else f"{outage.outage_ms:.0f}",
            "none" if not rerun else ", ".join(rerun),
            ok_text(ok),
        ]
    ]
    if outage.error is not None:
        summary = outage.error
    else:
        summary = (
            f"wg0 active {marks.get('wg_active_ms', 0) / 1000:.1f} s after `systemctl reboot`, traffic back after "
            f"{(outage.outage_ms or 0) / 1000:.1f} s; cloud-init "
            + ("did not run again" if not rerun else "RAN AGAIN")
            + f", its boot stages {status.get('status')} {settled_ms / 1000:.1f} s after wg0"
        )
    return CheckResult(
        "reboot",
        TITLES["reboot"],
        ok,
        summary,
        ["traffic", "event", "wg0 active after ms", "no replies for ms", "cloud-init modules re-run", ""],
        rows,
        data,
    )


def boot_checks(
    lab: BuiltLab,
    handshakes: dict[str, float | None],
    options: LabOptions,
    exporter_port: int,
    step: Callable[[str], None],
) -> Sequence[CheckResult]:
    def one(key: str, fn: Callable[[], CheckResult]) -> CheckResult:
        step(TITLES[key])
        return timed(key, fn, TITLES)

    return [
        one("cloud_init", lambda: check_cloud_init(lab, handshakes)),
        one("units", lambda: check_units(lab)),
        one("files", lambda: check_files(lab)),
        one("packages", lambda: check_packages(lab)),
        one("metrics", lambda: check_metrics(lab, exporter_port)),
        one("sysctl", lambda: check_sysctl(lab)),
        one("reboot", lambda: check_reboot(lab, options)),
    ]
