"""Keeping secrets out of messages (sans-IO): the one place that decides what of a URL or
of a command's arguments may appear in an exception, a log record, a repr or CLI output.

* :func:`redact_url` prints a Redis URL with its password, anything that may be part of
  one, and the values of query parameters not known to be harmless replaced by ``***``.
* :func:`redact_text` does the same to every URL inside a free text (a message built
  elsewhere, argparse's errors).
* :func:`bad_argument_error` describes a command argument that cannot be encoded by its
  position and type (and length), never its value: the arguments of ``HELLO 3 AUTH user
  password``, ``AUTH``, ``MIGRATE ... AUTH`` or ``CONFIG SET requirepass`` are secrets,
  and telling them apart from the rest is not worth the risk. Only the command's name is
  shown, when it looks like one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import unquote

from .errors import DataError

__all__ = ["REDACTED", "bad_argument_error", "describe_value", "redact_text", "redact_url"]

#: What stands in a message for a secret (``str``).
REDACTED: Final = "***"

#: Query parameters of a Redis URL whose values are shown (every other value, including
#: ``password``'s and those of unknown parameters, is redacted).
SHOWN_QUERY_PARAMS: Final = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "connect_timeout",
        "pool_timeout",
        "conn_max_idle_time",
        "pool_size",
        "max_connections",
        "max_active_conns",
        "min_idle_conns",
        "decode_responses",
        "client_name",
        "username",
        "ssl_server_hostname",
    }
)

# ``scheme://`` followed by everything up to white space: a URL inside a text.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
# A command name worth showing: a plain word (``SET``, ``FT.SEARCH``, ``CLIENT|LIST``).
_COMMAND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._|-]{0,31}")


def _redact_hostport(hostport: str) -> str:
    """``host[:port]`` with a port that is not a number replaced (it may be a password
    whose ``@host`` was forgotten: ``redis://user:secret``)."""
    if hostport.startswith("["):  # an IPv6 literal
        end = hostport.find("]")
        if end < 0:
            return hostport
        host, rest = hostport[: end + 1], hostport[end + 1 :]
        if not rest:
            return host
        if not rest.startswith(":"):
            return host + REDACTED
        port = rest[1:]
    else:
        host, colon, port = hostport.rpartition(":")
        if not colon:
            return hostport
    return f"{host}:{port if port.isdigit() else REDACTED}"


def _redact_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        name, eq, _value = item.partition("=")
        if unquote(name) in SHOWN_QUERY_PARAMS:
            parts.append(item)
        elif eq:
            parts.append(f"{name}={REDACTED}")
        elif item:
            parts.append(REDACTED)  # not a parameter: maybe part of a password
        else:
            parts.append(item)
    return "&".join(parts)


def redact_url(url: object) -> str:
    """``url`` with its secrets replaced by ``***``, for messages and logs.

    ``redis://user:secret@host:6379/0?password=x&socket_timeout=1`` becomes
    ``redis://user:***@host:6379/0?password=***&socket_timeout=1``. Everything before the
    *last* ``@`` is user info (so a password holding an unencoded ``/``, ``?``, ``#`` or
    ``@`` is hidden whole), of which only the user name is kept; a port that is not a
    number is hidden (``redis://user:secret`` has no ``@``: the "port" is the password);
    query values are shown only for the parameters of :class:`~trio_maint.ClientOptions`
    that hold no secret (``db``, the timeouts and pool sizes, ``decode_responses``,
    ``client_name``, ``username``, ``ssl_server_hostname``); a fragment is hidden. A
    value that is not a ``str`` gives ``<the type's name>``.

    :param url: a Redis URL, valid or not (``str``; anything else is named by its type).
    :returns: the redacted URL (``str``); it never contains the password.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    head = f"{scheme}://" if sep else ""
    userinfo, at, tail = rest.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        head += f"{user}:{REDACTED}@" if colon else f"{user}@"
    else:
        tail = rest
    tail, hash_, fragment = tail.partition("#")
    tail, qmark, query = tail.partition("?")
    hostport, slash, path = tail.partition("/")
    out = head + _redact_hostport(hostport) + slash + path
    if qmark:
        out += "?" + _redact_query(query)
    if hash_:
        out += "#" + (REDACTED if fragment else "")
    return out


def redact_text(text: str) -> str:
    """``text`` with every URL in it (``scheme://...`` up to white space) passed through
    :func:`redact_url`; for messages built from text this module did not write (``str``
    in, ``str`` out). A quote right before a URL and at its end is kept out of it
    (``'redis://u:***@h'``)."""

    def one(match: re.Match[str]) -> str:
        url = match.group(0)
        start = match.start()
        quote = text[start - 1] if start else ""
        if quote in ("'", '"') and url.endswith(quote):
            return redact_url(url[:-1]) + quote
        return redact_url(url)

    return _URL_IN_TEXT.sub(one, text)


def describe_value(value: object) -> str:
    """A value's type and size, never its content: ``"str of 8 characters"``,
    ``"bytes of 3 bytes"``, ``"int"``, ``"NoneType"`` (``str``)."""
    name = type(value).__name__
    if isinstance(value, str):
        return f"{name} of {len(value)} characters"
    if isinstance(value, bytes | bytearray):
        return f"{name} of {len(value)} bytes"
    if isinstance(value, memoryview):
        return f"{name} of {value.nbytes} bytes"
    return name


def _command_label(args: Sequence[object]) -> str:
    name = args[0] if args else None
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            return ""
    if isinstance(name, str) and _COMMAND_NAME.fullmatch(name):
        return f" of {name.upper()}"
    return ""


def _encodable(arg: object) -> bool:
    if isinstance(arg, bool) or not isinstance(arg, str | bytes | memoryview | int | float):
        return False
    if isinstance(arg, str):
        try:
            arg.encode("utf-8")
        except UnicodeError:
            return False
    return True


def bad_argument_error(args: Sequence[object]) -> DataError:
    """The :class:`~trio_maint.DataError` for a command whose arguments could not be
    encoded: it names the first bad argument's position (0 is the command's name), its
    type and length, and the command's name (when argument 0 is a plain word), and never
    any argument's value.

    :param args: the command as given (``Sequence`` of anything).
    :returns: the error to raise (``DataError``).
    """
    label = _command_label(args)
    for index, arg in enumerate(args):
        if _encodable(arg):
            continue
        if isinstance(arg, str):
            return DataError(
                f"command argument {index}{label} ({describe_value(arg)}) cannot be encoded "
                "as UTF-8 (it holds a lone surrogate); its value is not shown"
            )
        return DataError(
            f"invalid type for command argument {index}{label}: {describe_value(arg)}; "
            "convert it to bytes, str, int or float first"
        )
    return DataError(
        f"cannot encode the {len(args)} arguments of the command{label} (values not shown)"
    )
