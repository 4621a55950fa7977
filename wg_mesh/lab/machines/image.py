"""The booted lab's machine image and package source, both built by the host from the Debian archive.

* The image: a Debian trixie root file system made by `mmdebstrap` with systemd, cloud-init (NoCloud),
  networkd, wireguard-go and the lab's probes (ping, iperf3, nstat). It is what a cloud image is to a VM:
  everything the user data does NOT install. Built once, cached under `CACHE_DIR/image-<recipe hash>/`,
  shared read-only by every container (each gets its own overlay).
* The package source: a flat apt repository of exactly the packages a gateway's user data installs
  (`packages:`), resolved by the image's own apt with the apt configuration the user data writes
  (`/etc/apt/apt.conf.d/*`), so Recommends come along only if the user data lets them. Cached under
  `CACHE_DIR/apt-<hash>/`; bind-mounted read-only into the containers, whose only apt source it is.

The containers never reach the archive: the host downloads, the containers read files.
Rebuild: `sudo python -m wg_mesh lab image --rebuild` (or delete `CACHE_DIR`). `WG_MESH_LAB_CACHE` moves it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wg_mesh.lab.fabric.netns import LabError, run

CACHE_DIR = Path(os.environ.get("WG_MESH_LAB_CACHE", "/var/cache/wg-mesh-lab"))
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
# What a cloud image brings and the user data does not install: systemd as PID 1, cloud-init, networkd
# (part of `systemd` in trixie), D-Bus; wireguard-go stands in for the kernel module (the lab's host kernel
# has none: wg-quick falls back to it); ping, iperf3 and nstat (iproute2) are the lab's probes.
IMAGE_PACKAGES = (
    "systemd-sysv",
    "openssh-server",  # as in a cloud image (cloud-init's ssh module generates its host keys)
    "dbus",
    "cloud-init",
    "iproute2",
    "iputils-ping",
    "iperf3",
    "wireguard-go",
    "procps",
    "netbase",
)
# wireguard-tools Recommends wireguard-modules; an image without a kernel would make apt install a whole one.
# Real cloud kernels provide it (Ubuntu's linux-modules); in the image a tiny package does.
WG_MODULES_STANDIN = "wg-mesh-lab-wireguard-modules"
REPO_MOUNT = PurePosixPath("/srv/wg-mesh-lab-apt")  # where the containers see the package source
APT_CONF_DIR = PurePosixPath("/etc/apt/apt.conf.d")
RECIPE_VERSION = 2  # bump when the hooks below change meaning

LAB_CLOUD_CFG = """\
# wg-mesh lab: the seed is a NoCloud directory; apt's sources are the lab's local repository only.
datasource_list: [NoCloud, None]
apt:
  preserve_sources_list: true
"""
LAB_SOURCES = f"""\
Types: deb
URIs: file:{REPO_MOUNT}
Suites: ./
Trusted: yes
"""
STANDIN_CONTROL = f"""\
Package: {WG_MODULES_STANDIN}
Version: 1.0
Architecture: all
Maintainer: wg-mesh lab <root@localhost>
Provides: wireguard-modules
Priority: optional
Section: kernel
Description: wg-mesh lab: stands in for the kernel's WireGuard module
 The lab's gateways run wireguard-go; a cloud kernel provides wireguard-modules itself.
"""
CUSTOMIZE = f"""\
set -eu
root="$1"
chroot "$root" dpkg -i /tmp/standin.deb
rm -f "$root/tmp/standin.deb"
chroot "$root" systemctl enable systemd-networkd.service
printf '%s' '{LAB_CLOUD_CFG}' > "$root/etc/cloud/cloud.cfg.d/90-wg-mesh-lab.cfg"
rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*
printf '%s' '{LAB_SOURCES}' > "$root/etc/apt/sources.list.d/wg-mesh-lab.sources"
mkdir -p "$root{REPO_MOUNT}"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
rm -f "$root/etc/hostname"
: > "$root/etc/machine-id"
"""


@dataclass(frozen=True)
class Image:
    root: Path
    built_s: float | None  # how long the build took (None: from the cache)
    size_bytes: int


def recipe_key() -> str:
    recipe = json.dumps([RECIPE_VERSION, SUITE, MIRROR, IMAGE_PACKAGES, CUSTOMIZE, STANDIN_CONTROL])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def image_dir() -> Path:
    return CACHE_DIR / f"image-{SUITE}-{recipe_key()}"


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """One builder at a time (two labs starting together must not both build)."""
    CACHE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    with (CACHE_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _du(path: Path) -> int:
    out = run(["du", "-sb", "--one-file-system", str(path)], timeout=120).stdout
    return int(out.split()[0])


def ensure_image(rebuild: bool = False, log: Path | None = None) -> Image:
    """The cached image, built first if it is missing (or `rebuild`)."""
    final = image_dir()
    with cache_lock():
        if rebuild and final.exists():
            if str(final) in Path("/proc/self/mountinfo").read_text():
                raise LabError(f"{final} is in use by a running lab: stop it first (`lab down`)")
            shutil.rmtree(final)
        if (final / "image.json").exists():
            meta = json.loads((final / "image.json").read_text())
            return Image(final / "root", None, int(meta["size_bytes"]))
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE_DIR))
        try:
            standin = work / "standin"
            (standin / "DEBIAN").mkdir(parents=True)
            (standin / "DEBIAN" / "control").write_text(STANDIN_CONTROL)
            run(["dpkg-deb", "--root-owner-group", "-b", str(standin), str(work / "standin.deb")], timeout=60)
            (work / "customize.sh").write_text(CUSTOMIZE)
            argv = [
                "mmdebstrap",
                "--variant=apt",
                "--mode=root",
                "--format=directory",
                f"--include={','.join(IMAGE_PACKAGES)}",
                f"--customize-hook=copy-in {work / 'standin.deb'} /tmp",
                f'--customize-hook=sh {work / "customize.sh"} "$1"',
                SUITE,
                str(work / "root"),
                MIRROR,
            ]
            result = run(argv, timeout=900, check=False)
            if log is not None:
                log.write_text(result.stdout + result.stderr)
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
                raise LabError(f"mmdebstrap failed ({result.returncode}): {' / '.join(tail)}")
            built_s = time.monotonic() - started
            size = _du(work / "root")
            meta = {"suite": SUITE, "packages": IMAGE_PACKAGES, "built_s": round(built_s, 1), "size_bytes": size}
            (work / "image.json").write_text(json.dumps(meta, indent=1) + "\n")
            shutil.rmtree(standin)
            (work / "standin.deb").unlink()
            (work / "customize.sh").unlink()
            os.rename(work, final)
            prune_images(keep=final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
        return Image(final / "root", built_s, size)


def prune_images(keep: Path) -> None:
    """Remove images of older recipes that no container has mounted (their package sources go with them)."""
    mounts = Path("/proc/self/mountinfo").read_text()
    for old in CACHE_DIR.glob("image-*"):
        if old != keep and str(old) not in mounts:
            shutil.rmtree(old, ignore_errors=True)
    for repo in CACHE_DIR.glob("apt-*"):
        owner = (repo / "image").read_text().strip() if (repo / "image").exists() else ""
        built = (repo / "image.json").read_text() if (repo / "image.json").exists() else None
        current = Path(owner).parent / "image.json"
        stale = built is not None and current.exists() and current.read_text() != built
        if (owner and not Path(owner).exists()) or stale:
            shutil.rmtree(repo, ignore_errors=True)


# --- the local package source ---------------------------------------------------------------------


def repo_key(image: Image, packages: Sequence[str], apt_files: dict[str, bytes]) -> str:
    """Which image (and which build of it: a rebuilt image may hold other versions), packages and apt settings."""
    digest = hashlib.sha256(str(image.root).encode())
    meta = image.root.parent / "image.json"
    digest.update(meta.read_bytes() if meta.exists() else b"")
    digest.update(json.dumps(sorted(packages)).encode())
    for path in sorted(apt_files):
        digest.update(path.encode() + b"\0" + apt_files[path] + b"\0")
    return digest.hexdigest()[:12]


def _packages_index(debs: Sequence[Path]) -> str:
    """An apt `Packages` file for a flat repository (what dpkg-scanpackages writes, with dpkg-deb only)."""
    stanzas = []
    for deb in sorted(debs):
        control = run(["dpkg-deb", "--field", str(deb)], timeout=30).stdout.rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    return "\n".join(stanzas)


def _release(packages: bytes) -> str:
    date = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())
    return (
        f"Origin: wg-mesh-lab\nLabel: wg-mesh-lab\nDate: {date}\n"
        f"SHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
    )


@contextlib.contextmanager
def scratch_root(image: Image, work: Path) -> Iterator[Path]:
    """A throw-away copy-on-write view of the image (for running its apt on the host's network)."""
    for sub in ("upper", "work", "root"):
        (work / sub).mkdir(parents=True)
    root = work / "root"
    lower, upper, wdir = image.root, work / "upper", work / "work"
    run(["mount", "-t", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={wdir}", "wg-mesh-lab", str(root)])
    try:
        yield root
    finally:
        run(["umount", str(root)], check=False)


def ensure_repo(image: Image, packages: Sequence[str], apt_files: dict[str, bytes]) -> tuple[Path, float | None]:
    """The flat repository for these packages under this apt configuration (built first if missing).

    Returns (directory, seconds it took to fill or None when cached)."""
    final = CACHE_DIR / f"apt-{repo_key(image, packages, apt_files)}"
    with cache_lock():
        if (final / "Release").exists():
            return final, None
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix="apt-build-", dir=CACHE_DIR))
        try:
            with scratch_root(image, work / "scratch") as root:
                for path, content in apt_files.items():
                    target = root / path.lstrip("/")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
                shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
                (root / "tmp/archive.list").write_text(f"deb {MIRROR} {SUITE} main\n")
                apt = [
                    "chroot",
                    str(root),
                    "apt-get",
                    "-q",
                    "-o",
                    "Dir::Etc::SourceList=/tmp/archive.list",
                    "-o",
                    "Dir::Etc::SourceParts=/nonexistent",
                    "-o",
                    "Acquire::Languages=none",
                ]
                run([*apt, "update"], timeout=300)
                archives = root / "var/cache/apt/archives"
                result = run([*apt, "install", "--download-only", "-y", *packages], timeout=600, check=False)
                if result.returncode != 0:
                    raise LabError(f"cannot download {' '.join(packages)}: {result.stderr.strip()[-400:]}")
                repo = work / "repo"
                repo.mkdir()
                for deb in archives.glob("*.deb"):
                    shutil.copyfile(deb, repo / deb.name)
            debs = sorted(repo.glob("*.deb"))
            index = _packages_index(debs).encode()
            (repo / "Packages").write_bytes(index)
            (repo / "Release").write_text(_release(index))
            (repo / "image").write_text(f"{image.root}\n")
            meta = image.root.parent / "image.json"
            if meta.exists():
                shutil.copyfile(meta, repo / "image.json")
            os.rename(repo, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return final, time.monotonic() - started


def user_data_apt(user_data_files: Sequence[tuple[PurePosixPath, bytes]]) -> dict[str, bytes]:
    """The apt configuration files a user data writes (they decide about Recommends)."""
    return {str(p): c for p, c in user_data_files if p.parent == APT_CONF_DIR}


def missing_boot_tools() -> list[str]:
    missing = [tool for tool in ("systemd-nspawn", "mmdebstrap", "dpkg-deb") if shutil.which(tool) is None]
    if not missing:
        return []
    return [
        f"--boot needs {', '.join(missing)} (Debian: apt-get install --no-install-recommends systemd-container "
        "mmdebstrap)"
    ]


def image_summary(image: Image) -> dict[str, object]:
    return {"root": str(image.root), "built_s": image.built_s, "size_mb": round(image.size_bytes / 1e6)}
