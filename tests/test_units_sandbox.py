"""Every systemd unit and drop-in a gateway's user data writes, as `systemd-analyze security --offline=yes` rates it
(systemd >= 250; `--root` reads the units as the gateway would: the packages' own units under /lib, ours and their
drop-ins under /etc). Issue 20: the agent and the metrics service at most 4.0 (they were 6.1 and 8.9); node-exporter
and wg-quick@wg0, sandboxed by drop-ins as far as they still work, are held at what they reached (9.2 and 9.6
before). Measured on Debian bookworm's systemd 252:

| unit | before | after |
| --- | --- | --- |
| wg-mesh-agent.service | 6.1 | 2.1 |
| wg-mesh-metrics.service | 8.9 | 1.4 |
| prometheus-node-exporter.service | 9.2 | 1.5 |
| wg-quick@wg0.service | 9.6 | 2.6 |
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from tests import shipped
from wg_mesh.gateway import reresolve, ship
from wg_mesh.gateway.apply import Paths
from wg_mesh.plan import inputpolicy, metrics, rearmunit, render
from wg_mesh.tools.stackfile import load

AGENT, METRICS = ship.UNIT_NAME, f"{metrics.UNIT_NAME}.service"
NODE_EXPORTER, WG_QUICK = metrics.NODE_EXPORTER_SERVICE, f"wg-quick@{render.INTERFACE}.service"
# The most each may score: the issue's 4.0 for ours, what the drop-ins reached for the packages' units.
INPUT = inputpolicy.UNIT_NAME
# wg-mesh-rearm.service (a dynamic site's, wg_mesh.plan.rearmunit): first shipped by a stack file with examples/edge
LIMITS = {AGENT: 4.0, METRICS: 4.0, INPUT: 4.0, rearmunit.UNIT_NAME: 4.0, NODE_EXPORTER: 1.5, WG_QUICK: 2.6}
# The packages' own units (CI installs both packages: .ci/run); the gateway's come from Ubuntu's, the same options.
PACKAGE_UNITS = {NODE_EXPORTER: NODE_EXPORTER, WG_QUICK: "wg-quick@.service"}
UNIT_DIRS = (Path("/lib/systemd/system"), Path("/usr/lib/systemd/system"))
SYSTEMD_UNIT_DIR = PurePosixPath("/etc/systemd/system")


def offline_supported() -> bool:
    if shutil.which("systemd-analyze") is None:
        return False
    done = subprocess.run(["systemd-analyze", "--help"], capture_output=True, text=True, check=False)
    return "--offline" in done.stdout


needs_offline = pytest.mark.skipif(not offline_supported(), reason="needs systemd-analyze --offline (systemd >= 250)")


def package_unit(name: str) -> Path | None:
    return next((d / name for d in UNIT_DIRS if (d / name).exists()), None)


def gateway_root(tmp_path: Path, doc: dict[str, object]) -> tuple[Path, list[str]]:
    """A root with the units the user data writes and the packages' units; the service units found in it."""
    root = tmp_path / "root"
    shipped_units = []
    files = doc["write_files"]
    assert isinstance(files, list)
    for entry in files:
        path = PurePosixPath(entry["path"])
        if SYSTEMD_UNIT_DIR not in path.parents:
            continue
        target = root / path.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry["content"])
        unit = path.parent.name.removesuffix(".d") if path.parent != SYSTEMD_UNIT_DIR else path.name
        if unit.endswith(".service"):
            shipped_units.append(unit)
    for name in PACKAGE_UNITS.values():
        found = package_unit(name)
        if found is not None:
            (root / "lib/systemd/system").mkdir(parents=True, exist_ok=True)
            shutil.copy(found, root / "lib/systemd/system" / name)
    return root, sorted(set(shipped_units))


def exposure(root: Path, unit: str) -> float:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--root={root}", "--no-pager", unit],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d+)", done.stdout)
    assert found is not None, done.stdout[-2000:] + done.stderr[-2000:]
    return float(found.group(1))


@needs_offline
@pytest.mark.parametrize("case", shipped.cases(), ids=shipped.case_id)
def test_every_shipped_unit_is_sandboxed(case: tuple[Path, str], tmp_path: Path) -> None:
    doc = shipped.cloud_config(*case)
    root, units = gateway_root(tmp_path, doc)
    assert set(units) <= set(LIMITS), f"a unit without a sandbox limit: {set(units) - set(LIMITS)}"
    assert {METRICS, NODE_EXPORTER, WG_QUICK} <= set(units)  # drop-ins for the packages' units, on every gateway
    for unit in units:
        if unit in PACKAGE_UNITS and package_unit(PACKAGE_UNITS[unit]) is None:
            continue  # the package is not installed here (CI has both)
        score = exposure(root, unit)
        assert score <= LIMITS[unit], f"{unit}: exposure {score} > {LIMITS[unit]}"


@needs_offline
def test_the_measure_sees_a_unit_without_its_sandbox(tmp_path: Path) -> None:
    """The measure itself: the agent's unit without the shared sandbox block scores above the limit."""
    unit = tmp_path / "root/etc/systemd/system" / AGENT
    unit.parent.mkdir(parents=True)
    unit.write_text(ship.unit_text().replace(ship.SANDBOX, ""))
    assert exposure(tmp_path / "root", AGENT) > LIMITS[AGENT]
    unit.write_text(ship.unit_text())
    assert exposure(tmp_path / "root", AGENT) <= LIMITS[AGENT]


def test_the_agent_keeps_only_the_capabilities_it_needs() -> None:
    """CAP_NET_ADMIN (wg, ip, iptables, net.ipv4 sysctls) and CAP_NET_RAW (ping's raw socket, iptables-legacy);
    its files are root's, so no CAP_DAC_OVERRIDE; the metrics script needs CAP_NET_ADMIN alone (`wg show`)."""
    caps = {
        unit: next(line for line in text.splitlines() if line.startswith("CapabilityBoundingSet=")).split("=", 1)[1]
        for unit, text in ((AGENT, ship.unit_text()), (METRICS, metrics.service_unit()))
    }
    assert caps == {AGENT: "CAP_NET_ADMIN CAP_NET_RAW", METRICS: "CAP_NET_ADMIN"}
    assert "CapabilityBoundingSet=\n" in metrics.node_exporter_drop_in()


# --- what the agent may write (issue 33 item 4: the trust anchor out of its reach) --------------------------------


def writable(unit: str, path: str) -> bool:
    """Whether a service of `unit` may write `path`, as systemd.exec(5) sets its namespace up under ProtectSystem=strict
    (required here): the whole file system read-only but for the API file systems, PrivateTmp's /tmp, the
    StateDirectory= and ReadWritePaths= entries; ReadOnlyPaths= and ReadWritePaths= nest, the deepest entry holding
    the path decides (src/core/namespace.c mounts them sorted by path, parents first)."""
    lines = [line.partition("=") for line in unit.splitlines()]
    assert ("ProtectSystem", "=", "strict") in lines
    entries: dict[PurePosixPath, bool] = {PurePosixPath(p): True for p in ("/dev", "/proc", "/sys", "/tmp")}
    for key, _, value in lines:
        modes = {"ReadWritePaths": True, "ReadOnlyPaths": False, "StateDirectory": True}
        for item in value.split() if key in modes else ():
            entries[PurePosixPath("/var/lib", item) if key == "StateDirectory" else PurePosixPath(item.lstrip("-"))] = (
                modes[key]
            )
    target = PurePosixPath(path)
    holders = [p for p in entries if p == target or p in target.parents]
    return bool(holders) and entries[max(holders, key=lambda p: len(p.parts))]


def agent_writes() -> set[str]:
    """Every path the agent writes (its Paths; the re-resolver's live textfile: tests/test_safe_files.py)."""
    paths = Paths()
    return {getattr(paths, f.name) for f in dataclasses.fields(Paths)} | {
        reresolve.live_metrics_path(paths.path_metrics)
    }


LIVE_CASES = [(path, site) for path, site in shipped.cases() if load(path).delivery == "live"]


@pytest.mark.parametrize("case", LIVE_CASES, ids=shipped.case_id)
def test_the_agent_can_write_its_own_files_and_nothing_else_the_user_data_wrote(case: tuple[Path, str]) -> None:
    """The unit as each live gateway's user data ships it: agent.json (the pinned signing key, the site's facts, the
    bundle's hash), the INPUT policy, the package, the units are read-only to the agent; what it writes is not."""
    entries = shipped.cloud_config(*case)["write_files"]
    assert isinstance(entries, list)
    written = {entry["path"]: entry["content"] for entry in entries}
    unit = written[ship.UNIT_PATH]
    assert not writable(unit, ship.CONFIG_PATH), "agent.json is the trust anchor: never writable by the agent"
    owners = sorted(p for p in written if p not in agent_writes() and writable(unit, p))
    assert owners == [], f"the agent's unit may write what the user data put there: {owners}"
    cannot = sorted(p for p in agent_writes() if not writable(unit, p))
    assert cannot == [], f"the agent's unit cannot write its own files: {cannot}"


def test_the_read_only_files_are_the_ones_the_user_data_writes() -> None:
    assert set(ship.READ_ONLY_PATHS) == {ship.CONFIG_PATH, inputpolicy.RULES_PATH, inputpolicy.RULES6_PATH}


def test_the_model_of_the_sandbox_sees_a_writable_anchor() -> None:
    """The check itself: main's unit (58f58f7), ReadWritePaths=-/etc/wg-mesh alone, let the agent rewrite agent.json."""
    old = ship.unit_text().replace(f"ReadOnlyPaths={' '.join('-' + p for p in ship.READ_ONLY_PATHS)}\n", "")
    assert "ReadOnlyPaths" not in old and writable(old, ship.CONFIG_PATH)
    assert not writable(ship.unit_text(), ship.CONFIG_PATH) and writable(ship.unit_text(), "/etc/wg-mesh/peers.json")
    assert not writable(ship.unit_text(), "/usr/local/lib/wg-mesh/wgmesh_gateway/trust.py")
