"""The hooks that need the default route (a private endpoint's host route, MASQUERADE): run with bash as wg-quick
runs them (`(eval "$hook")` under `set -e`, %i replaced) and as the agent does (`bash -c`), against a fake `ip` that
reports a given default route and fake `ip`/`iptables` that record what they were asked. No default route: the
hook fails with a message and runs nothing else (issue 20: an empty expansion ran another command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from wg_mesh.gateway import wgconf

FAKE_IP = """#!/bin/sh
if [ "$*" = "-4 route show default" ]; then [ -n "$ROUTE" ] && printf '%s\\n' "$ROUTE"; exit 0; fi
echo "ip $*" >> "$LOG"
"""
FAKE_IPTABLES = """#!/bin/sh
echo "iptables $*" >> "$LOG"
"""
WG_QUICK = 'set -e -o pipefail; for hook in "$@"; do hook="${hook//%i/wg0}"; (eval "$hook"); done'


def every_rule_plan() -> wgconf.InterfacePlan:
    """A plan with every optional hook: the live agent renders these from a document."""
    private_path = wgconf.Peer("a", "A" * 43 + "=", ("10.1.0.0/16", "100.96.0.2/32"), "10.1.0.5:51820", 25)
    internet = wgconf.Peer("b", "B" * 43 + "=", ("10.2.0.0/16", "100.96.0.3/32"), "198.51.100.7:51820", 25, mtu=1380)
    return wgconf.InterfacePlan(
        "s", "100.96.0.1/24", 51820, 1420, 1380, True, (private_path, internet), ("198.51.100.7/32",)
    )


def default_route_hooks() -> list[str]:
    section = wgconf.parse_wg_quick_conf(wgconf.wg_quick_conf(every_rule_plan(), "K" * 43 + "="))[0][1]
    hooks = [h for h in section["PostUp"] + section["PostDown"] if h.startswith(wgconf.DEFAULT_ROUTE_GUARD)]
    assert len(hooks) == 3  # the endpoint route, MASQUERADE on and off
    return hooks


def run(tmp_path: Path, hook: str, route: str, how: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("ip", FAKE_IP), ("iptables", FAKE_IPTABLES)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    argv = ["bash", "-c", hook] if how == "agent" else ["bash", "-c", WG_QUICK, "wg-quick", hook]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ROUTE": route, "LOG": str(log)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return done, log.read_text().splitlines()


@pytest.mark.parametrize("how", ["agent", "wg-quick"])
def test_without_a_default_route_the_hook_fails_and_runs_nothing(tmp_path: Path, how: str) -> None:
    for hook in default_route_hooks():
        done, ran = run(tmp_path, hook, "", how)
        assert done.returncode != 0 and "wg-mesh: no default route" in done.stderr, hook
        assert ran == [], hook


@pytest.mark.parametrize(
    ("route", "endpoint_route", "device"),
    [
        ("default via 10.10.0.1 dev ens5 proto dhcp src 10.10.0.12 metric 100", "via 10.10.0.1 dev ens5", "ens5"),
        ("default via 10.100.0.1 dev ens4 proto dhcp metric 100", "via 10.100.0.1 dev ens4", "ens4"),
        ("default dev ppp0 scope link", "dev ppp0", "ppp0"),
    ],
)
@pytest.mark.parametrize("how", ["agent", "wg-quick"])
def test_with_a_default_route_the_hook_runs_its_command(
    tmp_path: Path, route: str, endpoint_route: str, device: str, how: str
) -> None:
    ran = []
    for hook in default_route_hooks():
        done, log = run(tmp_path, hook, route, how)
        assert done.returncode == 0, done.stderr
        ran += log
    assert ran == [
        f"iptables -t nat -A POSTROUTING -o {device} -j MASQUERADE",
        f"ip -4 route replace 10.1.0.5/32 {endpoint_route}",
        f"iptables -t nat -D POSTROUTING -o {device} -j MASQUERADE",
    ]
