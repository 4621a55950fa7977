"""The README's static-site procedure, run for real with /etc redirected: the key is never world-readable,
the package is installed before anything is written to /etc/wireguard, and nothing lands on the local disk."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECRET = "[Interface]\nPrivateKey = c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=\n"


def procedure() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("**Applying a static site's config.**") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    return block.group(1).replace("\\\n", " ")


def remote_commands(text: str) -> list[str]:
    """What each `ssh root@HOST '...'` runs, in order."""
    return re.findall(r"ssh root@\S+ '([^']*)'", text)


def test_package_first_then_the_config() -> None:
    first, second = remote_commands(procedure())
    assert "apt-get install -y wireguard-tools" in first and "/etc/wireguard" not in first
    assert "apt-get" not in second  # apt would read the piped config from stdin


def test_the_config_never_touches_the_local_disk() -> None:
    text = procedure()
    local = re.sub(r"'[^']*'", "''", text)  # drop quoted (remote and python) parts
    assert ">" not in local and "scp" not in text and "wg0.conf" not in local


def test_the_remote_commands_leave_the_key_0600_in_a_0700_directory(tmp_path: Path) -> None:
    _, write = remote_commands(procedure())
    etc = tmp_path / "etc"
    (etc / "sysctl.d").mkdir(parents=True)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("sysctl", "systemctl"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path}/calls\n')
        (stubs / tool).chmod(0o755)
    script = write.replace("/etc/", f"{etc}/")
    result = subprocess.run(
        ["/bin/sh", "-c", f"umask 022; {script}"], input=SECRET, text=True, capture_output=True, check=False,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    conf = etc / "wireguard" / "wg0.conf"
    assert conf.read_text() == SECRET
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert stat.S_IMODE((etc / "wireguard").stat().st_mode) == 0o700
    assert stat.S_IMODE((etc / "sysctl.d" / "99-wg-mesh.conf").stat().st_mode) == 0o644
    assert os.listdir(etc / "wireguard") == ["wg0.conf"]  # the temporary file was renamed, not left behind
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["sysctl --system", "systemctl enable wg-quick@wg0", "systemctl restart wg-quick@wg0"]
