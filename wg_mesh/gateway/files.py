"""Safe file I/O on a gateway: the one way wg-mesh writes a file there, and reads one of its own back.

Every file that the agent (wg0.conf, the metrics mapping, its state and record, its three textfiles), the
re-resolver (its state and textfile, in both delivery modes), the metrics script (its textfile and roam state) and the
bootstrap (the agent's modules) write goes through `atomic_write`; tests/test_safe_files.py plants links at every
one of those paths and fails when a gateway module writes a file any other way. The bootstrap reads a GCP gateway's
bundle file with `read_bytes`. The standalone scripts (wgmetrics.py, reresolve.py in user-data mode) carry this
module's code in place of their `from .files import` line
(wg_mesh.gateway.ship.standalone): one mechanism, one source.

`atomic_write(path, data, mode)` creates a fresh temporary file next to the target (a random name, never a fixed one;
O_CREAT|O_EXCL|O_NOFOLLOW: nothing planted there is opened, a symlink included), sets its mode before the first byte
(explicit, whatever the umask: wg0.conf is never readable by others, not even for a moment), writes and fsyncs it,
renames it over the target (rename(2) replaces a symlink or a hard link at the target, it never writes through one)
and fsyncs the directory; all of it relative to one directory descriptor opened with O_NOFOLLOW (a symlinked directory
is refused). Either the whole new file is there or the old one is untouched (an OSError says why).
`read_bytes`/`read_text` refuse a symlink (ELOOP), anything but a regular file (a FIFO never blocks them: O_NONBLOCK)
and a file above `limit` bytes, each an OSError; a missing file is None. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_LIMIT = 16 << 20  # bytes: far above any file of ours (a 512-peer wg0.conf is ~150 KB)


def _open_dir(directory: str, private: bool) -> int:
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700 if private else 0o755, exist_ok=True)
    return os.open(directory, _DIR_FLAGS)


def atomic_write(path: str, text: str | bytes, mode: int) -> None:
    """`text` at `path` with `mode`, all or nothing (OSError when it cannot be done; the target is then unchanged)."""
    data = text.encode() if isinstance(text, str) else text
    directory, name = os.path.split(path)
    dir_fd = _open_dir(directory or ".", private=not mode & 0o077)
    try:
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode & 0o600, dir_fd=dir_fd)  # owner-only until the exact mode is set
        try:
            try:
                os.fchmod(fd, mode)  # before any byte; umask cannot widen or narrow it
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_bytes(path: str, limit: int = READ_LIMIT) -> bytes | None:
    """The file's bytes, None when it does not exist; a symlink, anything but a regular file or more than `limit`
    bytes is an OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(f"{path}: larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str, limit: int = READ_LIMIT) -> str | None:
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", errors="replace")
