"""The machine and the versions a benchmark run used (recorded next to its results)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.lab.ipsec import CHARON, kernel_config_flags

KERNEL_FLAGS = ("CONFIG_WIREGUARD", "CONFIG_XFRM_USER", "CONFIG_INET_ESP", "CONFIG_CRYPTO_GCM", "CONFIG_XFRM_INTERFACE")
PYTHON_PACKAGES = ("pulumi", "pulumi-aws", "pulumi-gcp", "pulumi-random", "pydantic", "matplotlib")


def _first_line(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        return None
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return lines[0] if lines else None


def _deb_version(package: str) -> str | None:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False, timeout=10
    )
    return result.stdout.strip() or None if result.returncode == 0 else None


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _mem_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    return 0.0


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def collect() -> dict[str, Any]:
    flags = _cpu_flags()
    python_packages: dict[str, str | None] = {}
    for name in PYTHON_PACKAGES:
        try:
            python_packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            python_packages[name] = None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": {
            "nproc": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "cpu_aes_ni": "aes" in flags,
            "cpu_avx2": "avx2" in flags,
            "memory_gib": _mem_gib(),
            "kernel": platform.release(),
            "os": _os_release(),
            "kernel_config": kernel_config_flags(KERNEL_FLAGS),
            "wireguard_kernel_module": Path("/sys/module/wireguard").exists(),
        },
        "versions": {
            "python": platform.python_version(),
            **python_packages,
            "wireguard-go": _first_line(["wireguard-go", "--version"]),
            "wireguard-tools": _first_line(["wg", "--version"]),
            "strongswan": _deb_version("strongswan-charon") if Path(CHARON).exists() else None,
            "iperf3": _first_line(["iperf3", "--version"]),
            "iproute2": _first_line(["ip", "-V"]),
            "iptables": _first_line(["iptables", "--version"]),
        },
    }
