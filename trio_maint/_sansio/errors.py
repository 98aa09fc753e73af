"""The exception hierarchy of trio_maint (sans-IO: no Trio imports).

Every error the public API raises derives from :class:`RedisError`, apart from
``TypeError``/``ValueError`` for misuse. Timeouts also derive from the builtin
``TimeoutError`` so that ``except TimeoutError`` works for anyio users.
"""

from __future__ import annotations

import builtins
from typing import Any, TypeVar

__all__ = [
    "AskError",
    "AuthenticationError",
    "AuthorizationError",
    "BusyError",
    "CircuitBreakerOpenError",
    "ClusterDownError",
    "ConnectionBusyError",
    "ConnectionClosedError",
    "ConnectionError",
    "CrossSlotError",
    "DataError",
    "ExecAbortError",
    "HandoffDialError",
    "HandoffError",
    "HandoffQueueFullError",
    "HandoffRetriesExhaustedError",
    "InvalidClientNameError",
    "LoadingError",
    "MaintenanceNotSupportedError",
    "MovedError",
    "NoPermissionError",
    "NoScriptError",
    "OutOfMemoryError",
    "PoolTimeoutError",
    "ProtocolError",
    "ReadOnlyError",
    "RedisError",
    "ResponseError",
    "TimeoutError",
    "TryAgainError",
    "WatchError",
    "WrongTypeError",
    "check_command",
    "not_written",
    "request_written",
    "response_error",
]


class RedisError(Exception):
    """Base class of every error raised by trio_maint."""


class ConnectionError(RedisError):
    """The connection to the server failed, could not be made, or was lost.

    Raised when dialing fails (refused, unreachable, TLS failure), when the server closes
    the connection, or when the handshake is refused. The connection concerned is discarded.

    ``written`` (``bool``, default ``True``): whether any byte of the request may have been
    handed to the kernel, so the server may have run it. The connection sets it to
    ``False`` only when that is proven (the connection was already closed or broken, or
    the first write of the request failed with nothing accepted); the clients then resend
    the request (:mod:`trio_maint._sansio.retry`, docs/maintenance.md). ``True`` is the
    safe reading: such a request is never resent.
    """

    #: Whether any byte of the request may have reached the kernel (``bool``); see above.
    written: bool = True


class ConnectionClosedError(ConnectionError):
    """The client, pool or connection was closed by its owner and cannot be used any more."""


class ConnectionBusyError(RedisError):
    """Two tasks tried to use one connection at the same time.

    A connection serves one command (or pipeline) at a time; the second user gets this error
    at once, before any byte is written, so nothing is interleaved on the wire.
    """


class TimeoutError(RedisError, builtins.TimeoutError):
    """An operation did not finish within its timeout (connect, socket read/write, pool).

    Subclasses the builtin :class:`TimeoutError`, so ``except TimeoutError`` catches it.
    A command that timed out after sending leaves its connection discarded.
    """


class PoolTimeoutError(TimeoutError):
    """No connection became free in the pool within ``pool_timeout`` seconds."""


class ProtocolError(RedisError):
    """The server sent bytes that are not valid RESP (or not what the command expects).

    The connection that read them is discarded.
    """

    #: Raised while reading a pipeline's replies: ``(commands, replies)``, the sequence of
    #: commands that was sent and the replies read before the one at fault (a ``list``,
    #: in order), else ``None``. Auto-pipelining hands those replies to their commands.
    read_before: tuple[Any, list[Any]] | None = None


class DataError(RedisError):
    """A command argument has a type that cannot be encoded (only ``str``, ``bytes``,
    ``memoryview``, ``int`` and ``float`` can), a ``str`` that is not valid UTF-8, a
    value out of range, or no command at all. The message names the argument's position,
    type and length, never its value (it may be a password)."""


class InvalidClientNameError(DataError, ValueError):
    """A ``client_name`` Redis would refuse (``CLIENT SETNAME``, ``HELLO ... SETNAME``
    accept printable ASCII without spaces, ``'!'`` to ``'~'``): raised when the options
    are built, before any connection is made. A :class:`DataError`, and a ``ValueError``
    as every other invalid option."""


class MaintenanceNotSupportedError(ConnectionError):
    """The server refused ``CLIENT MAINT_NOTIFICATIONS`` while maintenance mode is
    ``enabled`` (see docs/maintenance.md)."""


class HandoffError(RedisError):
    """A connection handoff to a new endpoint failed (as Redis's MOVING notification)."""


class HandoffQueueFullError(HandoffError):
    """The HandoffManager's queue stayed full for the whole retry window (0.1 s)."""


class WatchError(RedisError):
    """A ``MULTI``/``EXEC`` transaction was aborted because a watched key changed."""


class ResponseError(RedisError):
    """The server answered a command with an error reply.

    ``str(err)`` is the server's message, e.g. ``"ERR unknown command 'FOO'"``; ``err.code``
    is its first word (``"ERR"``, ``"WRONGTYPE"``, ...). The connection stays usable.
    """

    @property
    def code(self) -> str:
        """The error's prefix, the first word of the message (``str``)."""
        msg = str(self)
        return msg.split(" ", 1)[0] if msg else ""


class AuthenticationError(ResponseError):
    """Authentication failed (``WRONGPASS``, ``NOAUTH`` or an ``AUTH`` error)."""


class NoPermissionError(ResponseError):
    """The ACL user may not run this command or touch this key (``NOPERM``)."""


AuthorizationError = NoPermissionError


class WrongTypeError(ResponseError):
    """The key holds a value of another type (``WRONGTYPE``)."""


class NoScriptError(ResponseError):
    """``EVALSHA`` named a script the server does not have (``NOSCRIPT``)."""


class ReadOnlyError(ResponseError):
    """A write was sent to a read-only replica (``READONLY``)."""


class BusyError(ResponseError):
    """The server is busy running a script or function (``BUSY``)."""


class LoadingError(ResponseError):
    """The server is loading its dataset into memory (``LOADING``)."""


class OutOfMemoryError(ResponseError):
    """The server is over its ``maxmemory`` and refused a write (``OOM``)."""


class ExecAbortError(ResponseError):
    """``EXEC`` aborted because a queued command was invalid (``EXECABORT``)."""


class TryAgainError(ResponseError):
    """A cluster multi-key command found its keys mid-migration (``TRYAGAIN``)."""


class ClusterDownError(ResponseError):
    """The cluster cannot serve the slot (``CLUSTERDOWN``)."""


class MovedError(ResponseError):
    """A cluster redirection: the slot lives on another node (``MOVED slot host:port``)."""


class AskError(ResponseError):
    """A cluster redirection for one request (``ASK slot host:port``)."""


def check_command(args: tuple[object, ...]) -> None:
    """Refuse an empty command before anything is sent (``execute_command()`` with no
    arguments would send ``*0``, which Redis never answers).

    :param args: the command name and its arguments (``tuple``).
    :raises DataError: ``args`` is empty.
    """
    if not args:
        raise DataError("execute_command() needs a command name (and its arguments); got none")


_CE = TypeVar("_CE", bound=ConnectionError)


def not_written(error: _CE) -> _CE:
    """Mark a :class:`ConnectionError` as raised before any byte of the request was handed
    to the kernel (sets its ``written`` flag to ``False``) and return it:
    ``raise not_written(ConnectionError(...))``. Only for what provably did not reach the
    server."""
    error.written = False
    return error


def request_written(error: BaseException) -> bool:
    """Whether the request whose attempt raised ``error`` may have been written (``bool``):
    the error's ``written`` flag (see :class:`ConnectionError`), ``True`` for an error
    without one."""
    return getattr(error, "written", True) is not False


_PREFIXES: dict[str, type[ResponseError]] = {
    "WRONGPASS": AuthenticationError,
    "NOAUTH": AuthenticationError,
    "NOPERM": NoPermissionError,
    "WRONGTYPE": WrongTypeError,
    "NOSCRIPT": NoScriptError,
    "READONLY": ReadOnlyError,
    "BUSY": BusyError,
    "LOADING": LoadingError,
    "OOM": OutOfMemoryError,
    "EXECABORT": ExecAbortError,
    "TRYAGAIN": TryAgainError,
    "CLUSTERDOWN": ClusterDownError,
    "MOVED": MovedError,
    "ASK": AskError,
}

_AUTH_MESSAGES = (
    "ERR invalid password",
    "ERR Client sent AUTH, but no password is set",
    "ERR AUTH <password> called without any password configured",
    "ERR invalid username-password pair",
)


def response_error(message: str) -> ResponseError:
    """Build the :class:`ResponseError` subclass that matches an error reply's prefix.

    ``message`` is the reply text without the leading ``-``. Used as hiredis's
    ``replyError`` callback, so error replies (also nested ones, e.g. in ``EXEC`` results)
    come back as values, never raised by the parser.
    """
    code = message.split(" ", 1)[0]
    cls = _PREFIXES.get(code)
    if cls is None:
        if code == "ERR" and message.startswith(_AUTH_MESSAGES):
            cls = AuthenticationError
        else:
            cls = ResponseError
    return cls(message)


class HandoffDialError(HandoffError):
    """The new endpoint of a handoff could not be reached (refused, unreachable, timed out,
    TLS failure).

    Raised by the ``perform`` callable given to :class:`~trio_maint.lowlevel.HandoffManager`; the
    manager treats it as retryable (with backoff, up to ``max_handoff_retries`` attempts)
    and records it in the endpoint's circuit breaker, as Redis's MOVING handling does
    (see docs/maintenance.md). Chain the original error with ``raise ... from exc``.
    """


class CircuitBreakerOpenError(HandoffError):
    """A handoff was refused without dialing because the target endpoint's circuit breaker
    is open (too many recent dial failures); see docs/maintenance.md."""


class HandoffRetriesExhaustedError(HandoffError):
    """Every allowed dial attempt of a handoff failed (``max_handoff_retries``); the last
    :class:`HandoffDialError` is the ``__cause__``."""


class CrossSlotError(RedisError):
    """The keys of one multi-key command (or of one cluster transaction) hash to different
    cluster slots. Raised by the cluster client before anything is sent; keep such keys
    together with a hash tag (``{user1}.a``, ``{user1}.b``)."""
