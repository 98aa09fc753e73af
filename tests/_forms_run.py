"""Running the calling forms (tests/_forms.py) through redis-py and trio_maint.

:func:`run_all` runs every form in four modes and returns one :class:`Result` per
(form, mode):

* ``decoded``: ``redis.Redis(protocol=3, decode_responses=True)`` against
  ``trio_maint.open_redis(url, decode_responses=True)``, direct calls;
* ``raw``: the same with ``decode_responses=False``;
* ``pipeline``: the form queued alone in a transaction pipeline on each side (decoded), the
  one-reply lists compared;
* ``cluster``: forms naming keys (all carry the ``{t}`` hash tag, so one slot) on
  ``trio_maint.open_redis_cluster`` against redis-py's direct decoded reply; the setup and
  the checks go to the master of that slot;
* ``cluster-pipeline``: the same forms alone in a ``ClusterPipeline`` transaction, against
  redis-py's pipeline reply.

redis-py is called synchronously from the Trio task (a test: the blocking is bounded by
``socket_timeout``); every trio_maint call is bounded by :data:`CALL_TIMEOUT`.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import trio

import trio_maint

from . import _forms_data_a, _forms_data_b, _forms_data_c, _forms_data_d
from ._forms import Form, first_difference, same

__all__ = [
    "CALL_TIMEOUT",
    "MODES",
    "Outcome",
    "Result",
    "all_forms",
    "applies",
    "form_ids",
    "run_all",
]

CALL_TIMEOUT = 5.0
MODES = ("decoded", "raw", "pipeline", "cluster", "cluster-pipeline")

#: verdicts, in the report's column order
VERDICTS = ("alike", "deliberate", "differs", "raises", "absent", "bad-form")


def all_forms() -> list[Form]:
    """Every form of the data modules, in order."""
    return [
        *_forms_data_a.FORMS,
        *_forms_data_b.FORMS,
        *_forms_data_c.FORMS,
        *_forms_data_d.FORMS,
    ]


def form_ids(forms: Sequence[Form]) -> list[str]:
    """A unique, readable id per form: its text (``#2``, ``#3`` for repeats)."""
    seen: dict[str, int] = {}
    ids = []
    for f in forms:
        text = f.text
        n = seen.get(text, 0) + 1
        seen[text] = n
        ids.append(text if n == 1 else f"{text}#{n}")
    return ids


@dataclasses.dataclass
class Outcome:
    """What one side did with a form: ``kind`` is ``ok``, ``server-error`` (a
    ``ResponseError``: ``value`` is its message), ``client-error`` (any other exception:
    ``value`` is ``Type: message``), ``absent`` (no such method), ``timeout`` or
    ``setup-error``; ``checks`` are the replies of the form's ``then`` commands."""

    kind: str
    value: Any = None
    checks: list[Any] = dataclasses.field(default_factory=list)

    def show(self) -> str:
        if self.kind == "ok":
            text = repr(self.value)
            if self.checks:
                text += f" then {self.checks!r}"
            return text if len(text) < 300 else text[:297] + "..."
        return f"<{self.kind}: {self.value}>"


@dataclasses.dataclass
class Result:
    form: Form
    form_id: str
    mode: str
    py: Outcome
    ours: Outcome
    verdict: str

    def explain(self) -> str:
        """The failure as the test and the report print it."""
        text = (
            f"[{self.mode}] {self.verdict}: {self.form.family} / {self.form_id}\n"
            f"    ours:     {self.ours.show()}\n    redis-py: {self.py.show()}"
        )
        if self.py.kind == self.ours.kind == "ok":
            norm = self.form.normaliser or (lambda v: v)
            where = first_difference(
                [norm(self.py.value), self.py.checks], [norm(self.ours.value), self.ours.checks]
            )
            if where:
                head = "reply" if where.startswith("[0]") else "checks"
                text += f"\n    first difference at {head}{where[3:]}"
        return text


def _error_outcome(exc: BaseException) -> Outcome:
    if isinstance(exc, (redis.ResponseError, trio_maint.ResponseError)):
        return Outcome("server-error", str(exc).splitlines()[0] if str(exc) else "")
    if isinstance(exc, (TimeoutError, redis.TimeoutError)):
        return Outcome("timeout", f"{type(exc).__name__}: {exc}")
    return Outcome("client-error", f"{type(exc).__name__}: {exc}")


def verdict(form: Form, py: Outcome, ours: Outcome) -> str:
    """``alike``, ``deliberate``, ``differs``, ``raises``, ``absent`` or ``bad-form``."""
    if py.kind == "setup-error" or ours.kind == "setup-error":
        return "bad-form"
    if form.error != (py.kind in ("server-error", "client-error")):
        return "bad-form"  # redis-py did not do what the form says it does
    if ours.kind == "absent":
        return "deliberate" if form.excluded else "absent"
    if _alike(form, py, ours):
        return "alike"
    if form.deliberate:
        if form.adapt is None or ours.kind != "ok":
            return "differs"
        adapted = Outcome(ours.kind, form.adapt(ours.value), ours.checks)
        return "deliberate" if _alike(form, py, adapted) else "differs"
    if py.kind == "ok" and ours.kind != "ok":
        return "raises"
    return "differs"


def _alike(form: Form, py: Outcome, ours: Outcome) -> bool:
    if py.kind != ours.kind:
        return False
    if py.kind == "client-error":
        return True
    norm = form.normaliser or (lambda v: v)
    if py.kind == "ok":
        return same(norm(py.value), norm(ours.value)) and same(py.checks, ours.checks)
    if py.kind == "server-error":
        return _same_message(py.value, ours.value)
    return same(py.value, ours.value)


def _same_message(a: str, b: str) -> bool:
    """Error messages alike but for one leading error code (``ERR``, ``NOSCRIPT``...),
    which redis-py drops for some errors, turning it into the exception's class."""
    if a == b:
        return True
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    code, _, rest = longer.partition(" ")
    return rest == shorter and code.isupper() and code.isalpha()


# ---------------------------------------------------------------------- one side


def _execute(client: redis.Redis, *args: Any) -> Any:
    """``client.execute_command(*args)`` (untyped in redis-py)."""
    untyped: Any = client
    return untyped.execute_command(*args)


def _reset_sync(raw: redis.Redis) -> None:
    _execute(raw, "FLUSHALL")
    _execute(raw, "SCRIPT", "FLUSH")
    _execute(raw, "FUNCTION", "FLUSH")


def _setup_sync(form: Form, raw: redis.Redis) -> str | None:
    _reset_sync(raw)
    try:
        for cmd in form.setup:
            _execute(raw, *cmd)
    except Exception as exc:
        return f"setup {cmd!r}: {type(exc).__name__}: {exc}"
    return None


def _checks_sync(form: Form, raw: redis.Redis) -> list[Any]:
    out: list[Any] = []
    for cmd in form.checks:
        try:
            out.append(_execute(raw, *cmd))
        except Exception as exc:
            out.append(f"<{type(exc).__name__}: {exc}>")
    return out


def run_py(form: Form, client: redis.Redis, raw: redis.Redis, *, pipeline: bool) -> Outcome:
    """The form through redis-py (synchronously)."""
    problem = _setup_sync(form, raw)
    if problem:
        return Outcome("setup-error", problem)
    try:
        with warnings.catch_warnings():  # watch()/unwatch() on a client are deprecated
            warnings.simplefilter("ignore")
            value = _call_py(form, client, pipeline)
    except Exception as exc:
        return _error_outcome(exc)
    return Outcome("ok", value, _checks_sync(form, raw))


def _call_py(form: Form, client: redis.Redis, pipeline: bool) -> Any:
    if pipeline:
        pipe = client.pipeline(transaction=True)
        getattr(pipe, form.method)(*form.args, **form.kwargs_dict())
        reply = pipe.execute(raise_on_error=False)
        if isinstance(reply[0], Exception):
            raise reply[0]
        return reply[0]
    return getattr(client, form.method)(*form.args, **form.kwargs_dict())


async def run_ours(form: Form, client: Any, raw: redis.Redis, *, pipeline: bool) -> Outcome:
    """The form through a trio_maint client (``Redis`` or ``RedisCluster``)."""
    problem = _setup_sync(form, raw)
    if problem:
        return Outcome("setup-error", problem)
    target = client.pipeline(transaction=True) if pipeline else client
    try:
        method = getattr(target, form.method)
    except AttributeError:
        return Outcome("absent", f"no {type(target).__name__}.{form.method}")
    try:
        with trio.fail_after(CALL_TIMEOUT):
            if pipeline:
                method(*form.args, **form.kwargs_dict())
                reply = await target.execute(raise_on_error=False)
                if isinstance(reply[0], Exception):
                    raise reply[0]
                value = reply[0]
            else:
                value = await method(*form.args, **form.kwargs_dict())
    except trio.TooSlowError:
        return Outcome("timeout", f"no reply in {CALL_TIMEOUT} s")
    except Exception as exc:
        return _error_outcome(exc)
    return Outcome("ok", value, _checks_sync(form, raw))


# ---------------------------------------------------------------------- all forms


@dataclasses.dataclass
class Targets:
    """Where to run: the standalone server's URL, and optionally a cluster (its URL and
    the URL of the master serving the ``{t}`` hash tag's slot)."""

    url: str
    cluster_url: str | None = None
    cluster_tag_node_url: str | None = None


def _py_client(url: str, decode: bool) -> redis.Redis:
    return redis.Redis.from_url(url, protocol=3, decode_responses=decode, socket_timeout=10)


async def run_all(
    targets: Targets, forms: Sequence[Form] | None = None, modes: Iterable[str] = MODES
) -> list[Result]:
    """Run ``forms`` (default: all) in ``modes``; one :class:`Result` per form and mode
    that applies to it (the cluster modes only when ``targets`` names a cluster)."""
    forms = list(all_forms() if forms is None else forms)
    ids = form_ids(forms)
    modes = [m for m in modes if not m.startswith("cluster") or targets.cluster_url]
    results: list[Result] = []
    raw = _py_client(targets.url, False)
    py_clients = {True: _py_client(targets.url, True), False: raw}
    # redis-py's replies, which the cluster modes compare with: mode → form id → outcome
    reference: dict[str, dict[str, Outcome]] = {"decoded": {}, "pipeline": {}}
    try:
        for mode in ("decoded", "raw", "pipeline"):
            needed = f"cluster-{mode}" if mode == "pipeline" else "cluster"
            if mode not in modes and needed not in modes:
                continue
            decode = mode != "raw"
            async with trio_maint.open_redis(
                targets.url, maintenance=DISABLED, decode_responses=decode
            ) as ours:
                for form, fid in zip(forms, ids, strict=True):
                    if not applies(form, mode):
                        continue
                    pipe = mode == "pipeline"
                    py = run_py(form, py_clients[decode], raw, pipeline=pipe)
                    if mode in reference:
                        reference[mode][fid] = py
                    if mode in modes:
                        tm = await run_ours(form, ours, raw, pipeline=pipe)
                        results.append(Result(form, fid, mode, py, tm, verdict(form, py, tm)))
        if targets.cluster_url and any(m.startswith("cluster") for m in modes):
            results += await _run_cluster(targets, forms, ids, reference, modes)
    finally:
        raw.close()
        py_clients[True].close()
    return results


DISABLED = trio_maint.MaintConfig(mode="disabled")


def applies(form: Form, mode: str) -> bool:
    """Whether ``form`` runs in ``mode`` (its flags)."""
    if mode == "raw":
        return not form.decoded_only
    if form.raw_only:
        return False
    if mode.startswith("cluster") and not form.runs_on_cluster:
        return False
    if mode == "cluster-pipeline" and not form.in_cluster_pipeline:
        return False
    return form.in_pipeline or not mode.endswith("pipeline")


async def _run_cluster(
    targets: Targets,
    forms: Sequence[Form],
    ids: Sequence[str],
    reference: dict[str, dict[str, Outcome]],
    modes: Sequence[str],
) -> list[Result]:
    assert targets.cluster_url is not None and targets.cluster_tag_node_url is not None
    results = []
    node_raw = _py_client(targets.cluster_tag_node_url, False)
    try:
        async with trio_maint.open_redis_cluster(
            targets.cluster_url, maintenance=DISABLED, decode_responses=True
        ) as rc:
            for mode, ref in (("cluster", "decoded"), ("cluster-pipeline", "pipeline")):
                if mode not in modes:
                    continue
                for form, fid in zip(forms, ids, strict=True):
                    if not applies(form, mode):
                        continue
                    tm = await run_ours(form, rc, node_raw, pipeline=mode.endswith("pipeline"))
                    py = reference[ref][fid]
                    results.append(Result(form, fid, mode, py, tm, verdict(form, py, tm)))
    finally:
        node_raw.close()
    return results


# ---------------------------------------------------------------------- coverage

#: families of the server's command groups (COMMAND DOCS ``group``) that the forms cover
GROUPS = {
    "string": "strings",
    "bitmap": "bitmaps",
    "generic": "keys",
    "hash": "hashes",
    "list": "lists",
    "set": "sets",
    "sorted-set": "sorted sets",
    "stream": "streams",
    "hyperloglog": "hyperloglog",
    "geo": "geo",
    "scripting": "scripting",
    "transactions": "transactions",
    "server": "server",
    "connection": "connection",
}

#: redis-py methods whose name is not the command's
ALIASES = {
    "delete": "del",
    "debug_object": "debug",
    "client_kill_filter": "client|kill",
    "xpending_range": "xpending",
    "client_tracking_on": "client|tracking",
    "client_tracking_off": "client|tracking",
    "acl_log_reset": "acl|log",
}


def redispy_methods(docs: dict[str, Any]) -> dict[str, str]:
    """redis-py ``Redis`` methods naming a command of ``docs`` (the server's COMMAND DOCS
    as a dict) in the covered groups: method → family."""
    commands: dict[str, str] = {}
    for name, doc in docs.items():
        commands[name.replace("-", "_")] = doc["group"]
        for sub, sdoc in (doc.get("subcommands") or {}).items():
            commands[sub.replace("|", "_").replace("-", "_")] = sdoc["group"]
    out = {}
    for m in dir(redis.Redis):
        if m.startswith("_"):
            continue
        name = ALIASES.get(m, m).replace("|", "_")
        group = commands.get(name)
        if group in GROUPS:
            out[m] = GROUPS[group]
    return out


def command_docs(raw: redis.Redis) -> dict[str, Any]:
    """The server's COMMAND DOCS as ``{name: doc}`` (str keys, nested dicts); ``raw`` is a
    client of its own (its COMMAND reply callback is replaced)."""
    raw.set_response_callback("COMMAND", lambda reply, **options: reply)  # the raw map
    reply = _execute(raw, "COMMAND", "DOCS")
    return dict(json.loads(json.dumps(_text(reply))))


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_text(k): _text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text(v) for v in value]
    return value
