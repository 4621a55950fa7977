"""The benchmark's own setup: the Debian packages it needs beyond the test suite's, and its Python deps.

Installed only when missing: `apt-get install --no-install-recommends` for the packages, `pip install -r
bench/requirements.txt` (pinned) into the running interpreter for the plots.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# strongswan-charon: the IKE daemon; strongswan-swanctl: its vici CLI; libstrongswan-standard-plugins: openssl
# (AES-GCM with AES-NI); libcharon-extra-plugins: kernel-libipsec (userspace ESP where the kernel has none).
APT_PACKAGES = (
    "strongswan-charon",
    "strongswan-swanctl",
    "libstrongswan-standard-plugins",
    "libcharon-extra-plugins",
    "wireguard-tools",
    "wireguard-go",
    "iperf3",
    "iproute2",
    "iptables",
    "iputils-ping",
    "procps",
    "util-linux",
)
REQUIREMENTS = Path(__file__).resolve().parent / "requirements.txt"

Log = Callable[[str], None]


def missing_debs(packages: tuple[str, ...] = APT_PACKAGES) -> list[str]:
    missing = []
    for package in packages:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def install_debs(log: Log) -> None:
    missing = missing_debs()
    if not missing:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"missing Debian packages {', '.join(missing)}; run the bench as root to install them")
    log(f"setup: apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def install_python(log: Log) -> None:
    if importlib.util.find_spec("matplotlib") is not None:
        return
    log(f"setup: pip install -r {REQUIREMENTS.name}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)


def setup(log: Log) -> None:
    install_debs(log)
    install_python(log)
