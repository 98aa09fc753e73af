"""``trio-maint simulate``'s control socket on the simulator's side: its path prepared
(the default directory created private, a stale socket removed), bound for this user
only, read a line at a time, and removed with the directory it created on the way out."""

from __future__ import annotations

import os
import socket
import stat

import trio

from .simulate_control import MAX_LINE, ControlError

__all__ = [
    "ControlPathError",
    "bind_control",
    "prepare_control_path",
    "read_line",
    "remove_control",
    "remove_directory",
]


class ControlPathError(Exception):
    """The control socket's path cannot be used (the message says why)."""


def prepare_control_path(path: str, default: bool) -> bool:
    """Create the default directory (0700, ours) and remove a stale socket; refuse when a
    simulator already answers there. Returns whether it created the directory (for
    :func:`remove_control`).

    :raises ControlPathError: the path is in use, or the directory is not private.
    """
    directory = os.path.dirname(path) or "."
    created = False
    if default and not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=0o700)
            created = True
        except FileExistsError:
            pass  # made meanwhile by someone else: checked below, never removed
    if default and hasattr(os, "getuid"):
        info = os.stat(directory)
        private = info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & 0o077
        if not private and directory != os.environ.get("XDG_RUNTIME_DIR"):
            raise ControlPathError(
                f"{directory} must belong to you and be private (chmod 700), or give --control PATH"
            )
    if not os.path.lexists(path):
        return created
    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise ControlPathError(f"{path} exists and is not a socket; give another --control PATH")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: nobody listens
    else:
        raise ControlPathError(
            f"a simulator is already running on the control socket {path}; stop it or give "
            "another --control PATH"
        )
    finally:
        probe.close()
    return created


def remove_control(path: str) -> None:
    """Remove the control socket (once bound: before, the path may be another's)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_directory(path: str, created: bool) -> None:
    """Remove the control socket's directory when :func:`prepare_control_path` created it
    (``created``) and it is empty now; a directory found there is left alone."""
    if created:
        try:
            os.rmdir(os.path.dirname(path) or ".")
        except OSError:
            pass  # something else was put there: not ours to remove


async def bind_control(path: str) -> trio.SocketListener:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            await sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(16)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


async def read_line(stream: trio.abc.Stream, buffer: bytearray) -> bytes | None:
    """The next line without its ``\\n`` (``None`` at EOF).

    :raises ControlError: a line longer than :data:`MAX_LINE`.
    """
    while True:
        end = buffer.find(b"\n")
        if end >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            return line
        if len(buffer) > MAX_LINE:
            raise ControlError(f"control line longer than {MAX_LINE} bytes")
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
