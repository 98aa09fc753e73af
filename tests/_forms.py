"""Calling forms for the redis-py side-by-side harness (tests/test_redispy_forms.py).

A *form* is one call as a redis-py user writes it: a method name, positional and keyword
arguments, and the keys it needs created first. The harness (tests/_forms_run.py) runs every
form through redis-py and through trio_maint against the same redis-server and compares the
replies. The forms themselves live in tests/_forms_data*.py, one family per section.

How a form runs (each side, each mode): ``FLUSHALL`` (and the script and function
caches); the ``given`` commands (sent raw by a
redis-py client: the setup is not under test); the call; the ``then`` commands (raw again,
their replies are compared too, so effects such as a TTL are checked, not only replies).
Flushing before each side means both sides see the same keys under the same names, so
replies naming keys compare without rewriting.

Normalisation before comparing (written down here and in docs/compatibility.md):

* a ``tuple`` and a ``list`` with the same items are alike (``cursor, keys = scan()``
  unpacks both); ``set`` and ``frozenset`` likewise;
* otherwise types must match: ``True`` is not ``1``, ``1`` is not ``1.0``, ``"a"`` is not
  ``b"a"``; ``float`` values are alike within a relative 1e-9;
* ``dict`` compares by keys and values, not order;
* a form may name a normaliser (:data:`UNORDERED`, :data:`SCAN`, :data:`SHAPE`,
  :data:`LENGTH`, :data:`TYPE`, or its own function) for replies whose order or content
  the server does not fix (``HKEYS``, ``SCAN``, ``SRANDMEMBER``, ``TIME``, ``INFO``...);
* errors: both sides raising the server's error (``ResponseError`` or a subclass) with the
  same message are alike (a leading error code such as ``ERR`` or ``NOSCRIPT`` is not
  compared: redis-py drops some codes, turning them into exception classes); both
  rejecting the arguments client-side (any other exception) are alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

__all__ = [
    "AS_INT",
    "AS_XREAD",
    "LENGTH",
    "SCAN",
    "SHAPE",
    "TYPE",
    "UNORDERED",
    "Form",
    "Normaliser",
    "call",
    "family",
    "same",
]

Normaliser: TypeAlias = Callable[[Any], Any]
Command: TypeAlias = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Form:
    """One calling form. Build with :func:`call` and the chaining methods."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    family: str = ""
    setup: tuple[Command, ...] = ()
    checks: tuple[Command, ...] = ()
    normaliser: Normaliser | None = None
    #: run in a pipeline too (not for commands that change the connection's state)
    in_pipeline: bool = True
    #: run on the cluster client (``None``: when the form names keys)
    on_cluster: bool | None = None
    #: run in a cluster pipeline too (when on the cluster and in a pipeline)
    in_cluster_pipeline: bool = True
    #: redis-py raises here (the comparison is then of the errors)
    error: bool = False
    #: a documented deliberate difference: the reason (not a failure)
    deliberate: str | None = None
    #: turns our reply into redis-py's shape: the difference is deliberate only if the
    #: adapted reply is alike (so a documented difference still guards the content)
    adapt: Normaliser | None = None
    #: a documented exclusion: trio_maint has no such method, for this reason
    excluded: str | None = None
    #: only in the decoded mode (replies that are binary, e.g. DUMP)
    raw_only: bool = False
    decoded_only: bool = False

    # ------------------------------------------------------------------ chaining

    def given(self, *commands: Command) -> Form:
        """Raw commands run before the call (after ``FLUSHDB``)."""
        return dataclasses.replace(self, setup=self.setup + commands)

    def then(self, *commands: Command) -> Form:
        """Raw commands run after the call; their replies are compared as well."""
        return dataclasses.replace(self, checks=self.checks + commands)

    def norm(self, normaliser: Normaliser) -> Form:
        """Compare replies after ``normaliser`` (applied to both sides)."""
        return dataclasses.replace(self, normaliser=normaliser)

    def solo(self) -> Form:
        """Not run in a pipeline (the command changes or reads the connection's state)."""
        return dataclasses.replace(self, in_pipeline=False)

    def nocluster(self) -> Form:
        """Not run on the cluster client."""
        return dataclasses.replace(self, on_cluster=False)

    def no_cluster_pipeline(self) -> Form:
        """Not run in a cluster pipeline (say why where it is used)."""
        return dataclasses.replace(self, in_cluster_pipeline=False)

    def cluster(self) -> Form:
        """Run on the cluster client although the form names no key."""
        return dataclasses.replace(self, on_cluster=True)

    def raises(self) -> Form:
        """redis-py raises for this form; the errors are compared."""
        return dataclasses.replace(self, error=True)

    def differs(self, reason: str, adapt: Normaliser) -> Form:
        """A documented deliberate difference (listed in docs/compatibility.md): ``adapt``
        maps our reply to redis-py's, and the adapted replies must be alike."""
        return dataclasses.replace(self, deliberate=reason, adapt=adapt)

    def absent(self, reason: str) -> Form:
        """trio_maint leaves the method out on purpose (docs/commands.md says why): its
        absence is deliberate; should the method appear, it is compared as any other."""
        return dataclasses.replace(self, excluded=reason)

    def decoded(self) -> Form:
        """Only with ``decode_responses=True``."""
        return dataclasses.replace(self, decoded_only=True)

    def raw(self) -> Form:
        """Only with ``decode_responses=False`` (the reply is binary)."""
        return dataclasses.replace(self, raw_only=True)

    # ------------------------------------------------------------------ derived

    @property
    def keyed(self) -> bool:
        """Whether the call names a key (all keys carry the ``{t}`` hash tag); a keyless
        call (``DBSIZE``, ``RANDOMKEY``) goes to any node of a cluster."""
        return any("{t}" in str(a) for a in _flat((self.args, self.kwargs)))

    @property
    def runs_on_cluster(self) -> bool:
        return self.keyed if self.on_cluster is None else self.on_cluster

    def kwargs_dict(self) -> dict[str, Any]:
        return dict(self.kwargs)

    @property
    def text(self) -> str:
        """The call as a user writes it: ``zadd('{t}z', {'a': 1}, incr=True)``."""
        parts = [_show(a) for a in self.args]
        parts += [f"{k}={_show(v)}" for k, v in self.kwargs]
        return f"{self.method}({', '.join(parts)})"


def call(method: str, *args: Any, **kwargs: Any) -> Form:
    """A form calling ``method(*args, **kwargs)``."""
    return Form(method, args, tuple(kwargs.items()))


def family(name: str, forms: Iterable[Form]) -> list[Form]:
    """``forms`` with their family set to ``name``."""
    return [dataclasses.replace(f, family=name) for f in forms]


def _show(value: Any) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return str(value.__name__)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _flat(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flat(k)
            yield from _flat(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _flat(v)
    else:
        yield value


# ---------------------------------------------------------------------- normalisers


def _key(value: Any) -> str:
    return repr(value)


def UNORDERED(value: Any) -> Any:
    """A list whose order the server does not fix: sorted (by ``repr``)."""
    if isinstance(value, (list, tuple)):
        return sorted(value, key=_key)
    if isinstance(value, dict):
        return {k: UNORDERED(v) for k, v in value.items()}
    return value


def SCAN(value: Any) -> Any:
    """A ``(cursor, items)`` reply: the items sorted (a dict of items stays a dict)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return [value[0], UNORDERED(value[1])]
    return value


def SHAPE(value: Any) -> Any:
    """Only the shape: scalars become their type's name; lists keep their length; dicts
    keep their keys (values by shape)."""
    if isinstance(value, dict):
        return {k: SHAPE(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [SHAPE(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {type(v).__name__ for v in value}
    return type(value).__name__


def LENGTH(value: Any) -> Any:
    """Only the type and length (random members, random fields)."""
    if isinstance(value, (list, tuple)):
        return ("list", len(value))
    if isinstance(value, (set, frozenset, dict, str, bytes)):
        return (type(value).__name__, len(value))
    return type(value).__name__


def TYPE(value: Any) -> Any:
    """Only the type (replies that change between two calls: ``TIME``, ``LASTSAVE``...)."""
    if isinstance(value, tuple):
        return "list"
    return type(value).__name__


def KEYS_OF(value: Any) -> Any:
    """A dict reply: only its keys (``INFO``-like replies whose values change)."""
    if isinstance(value, dict):
        return sorted(map(str, value))
    return TYPE(value)


# ---------------------------------------------------------------------- adapters


def AS_INT(value: Any) -> Any:
    """``bool`` replies (or lists of them) as the server's 0/1, as redis-py passes them."""
    if isinstance(value, list):
        return [AS_INT(v) for v in value]
    return int(value) if isinstance(value, bool) else value


def AS_XREAD(value: Any) -> Any:
    """Typed ``XREAD``/``XREADGROUP`` replies (stream → entries) in redis-py's RESP3 shape
    (stream → a one-item list holding the ``(id, fields)`` pairs)."""
    if isinstance(value, dict):
        return {k: [[tuple(entry) for entry in v]] for k, v in value.items()}
    return value


# ---------------------------------------------------------------------- comparison


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` (redis-py's) and ``b`` (ours) are alike under the rules above."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (set, frozenset)) and isinstance(b, (set, frozenset)):
        return set(a) == set(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)
    return bool(a == b)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ under :func:`same`: ``"[k][0]: a!r vs b!r"``, or
    ``None`` when they are alike."""
    if same(a, b):
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            found = first_difference(a[k], b[k], f"{path}[{k!r}]")
            if found:
                return found
    return f"{path or 'reply'}: redis-py {_show(a)} vs ours {_show(b)}"
