"""The agent's own files: written atomically under a unique name, read and replaced without following a symlink.

`atomic_write` creates a fresh temporary file next to the target (a random name, O_CREAT|O_EXCL|O_NOFOLLOW: nothing
planted there, a symlink at an old fixed `.tmp` name included, is opened), with its mode set before the first byte
(so `wg0.conf` is never readable by others, not even for a moment), fsyncs it, renames it over the target (rename(2)
replaces a symlink at the target, it never writes through one) and fsyncs the directory. All of it relative to one
directory descriptor opened with O_NOFOLLOW. `read_bytes`/`read_text` refuse a symlink (ELOOP: an OSError).
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, None when it does not exist; a symlink (or anything but a regular file) is an OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str) -> str | None:
    data = read_bytes(path)
    return None if data is None else data.decode("utf-8", errors="replace")
