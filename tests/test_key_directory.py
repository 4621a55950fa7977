"""wg0.conf, private key included, is never readable by others, not even while cloud-init writes it (issue 20).

cloud-init's write_files creates the file with open(path, "wb") (0644 under its umask) and chmods it to its
`permissions` only after writing the content (cloudinit/util.py write_file); a missing parent directory is made
with os.makedirs (0755). So the key is safe only in a directory others cannot enter, and every user data makes
/etc/wireguard 0700 in bootcmd, which cloud-init runs before write_files (config/cloud.cfg.tmpl)."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

import pytest

from tests import shipped
from wg_mesh.plan import render

WG_DIR = PurePosixPath(render.WG_CONF_PATH).parent
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with its cloud-init (CI installs it: the schema tests use it)


@pytest.mark.parametrize("case", shipped.cases(), ids=shipped.case_id)
def test_every_user_data_shuts_the_key_directory_before_write_files(case: tuple[Path, str]) -> None:
    doc = shipped.cloud_config(*case)
    assert list(doc).index("bootcmd") < list(doc).index("write_files")
    bootcmd = doc["bootcmd"]
    assert isinstance(bootcmd, list) and bootcmd[0] == ["install", "-d", "-m", "0700", str(WG_DIR)]
    files = doc["write_files"]
    assert isinstance(files, list)
    for entry in files:
        if WG_DIR in PurePosixPath(entry["path"]).parents:
            assert entry["permissions"] == "0600", entry["path"]


def cloud_init_available() -> bool:
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import cloudinit.util"], capture_output=True, check=False)
    return done.returncode == 0


# What cloud-init's own write_file does, watched at the moment before it sets the file's mode: the file is still
# 0644 then, with the key in it; what protects it is the directory, made 0700 by bootcmd's command beforehand.
WATCH = """
import os, sys
from cloudinit import util
seen = []
real_chmod = util.chmod
def watching(path, mode):
    seen.append((oct(os.stat(os.path.dirname(path)).st_mode & 0o777), oct(os.stat(path).st_mode & 0o777)))
    real_chmod(path, mode)
util.chmod = watching
os.umask(0o022)
util.write_file(sys.argv[1], "PrivateKey = secret\\n", mode=0o600)
print(seen[-1][0], seen[-1][1], oct(os.stat(sys.argv[1]).st_mode & 0o777))
"""


@pytest.mark.skipif(not cloud_init_available(), reason="needs Debian's cloud-init for /usr/bin/python3")
def test_cloud_init_writes_the_key_0644_first_inside_the_0700_directory(tmp_path: Path) -> None:
    doc = shipped.cloud_config(shipped.STACK_FILES[0], "aws-use1")
    directory = tmp_path / "wireguard"
    argv = [str(a) for a in doc["bootcmd"][0]]  # type: ignore[index]
    subprocess.run([*argv[:-1], str(directory)], check=True)
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", WATCH, str(directory / "wg0.conf")], capture_output=True, text=True, check=True
    )
    directory_mode, file_mode_while_written, file_mode = done.stdout.split()
    assert (directory_mode, file_mode) == ("0o700", "0o600")
    assert file_mode_while_written == "0o644"  # why the directory must be shut first
