"""Side by side with redis-py: every calling form of tests/_forms_data*.py (a redis-py user's
call: method, arguments, keywords) answered alike by trio_maint, directly with and without
``decode_responses``, in a pipeline, and (single-slot forms) on the cluster client.

The forms run once per module against this module's own redis-server (never the suite's
shared one) and the session's ``redis_cluster``; each test then checks one form in every mode
that applies to it. A form fails when our method is absent, raises where redis-py answers, or
answers differently after the normalisation written in tests/_forms.py, unless the form
documents a deliberate difference (``Form.differs``, listed in docs/compatibility.md).
``python -m tests._forms_report`` prints the same results as a per-family summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

import trio_maint
from trio_maint._sansio.slots import key_slot
from trio_maint._sansio.streams import StreamEntry
from trio_maint.testing import LocalCluster, RedisServer

from . import _forms_data_d
from ._forms import AS_INT, AS_XREAD, LENGTH, SCAN, SHAPE, TYPE, UNORDERED, call, same
from ._forms_run import (
    MODES,
    Result,
    Targets,
    all_forms,
    applies,
    command_docs,
    form_ids,
    redispy_methods,
    run_all,
    verdict,
)

FORMS = all_forms()
IDS = form_ids(FORMS)


@pytest.fixture(scope="module")
def forms_server() -> Iterator[RedisServer]:
    """This module's own redis-server (DEBUG OBJECT allowed from loopback)."""
    with RedisServer(extra_args=("--enable-debug-command", "local")) as server:
        yield server


@pytest.fixture(scope="module")
def form_results(forms_server: RedisServer, redis_cluster: LocalCluster) -> dict[str, list[Result]]:
    """Every form run in every mode that applies: form id → its results."""
    node = redis_cluster.master_of_slot(key_slot("{t}"))
    targets = Targets(forms_server.url, redis_cluster.url, node.server.url)
    results = trio.run(run_all, targets)
    by_form: dict[str, list[Result]] = {}
    for r in results:
        by_form.setdefault(r.form_id, []).append(r)
    return by_form


@pytest.mark.parametrize("form_id", IDS)
def test_form(form_results: dict[str, list[Result]], form_id: str) -> None:
    """One form, in each of its modes, answered as redis-py answers it."""
    results = form_results[form_id]
    assert results, form_id
    bad = [r for r in results if r.verdict not in ("alike", "deliberate")]
    assert not bad, "\n".join(r.explain() for r in bad)


def test_forms_cover_redispy(forms_server: RedisServer) -> None:
    """At least 400 forms over 220 methods; every redis-py ``Redis`` method naming a command
    of the covered families (from the server's own COMMAND DOCS) has a form or a reason."""
    methods = {f.method for f in FORMS}
    assert len(FORMS) >= 400 and len(methods) >= 220, (len(FORMS), len(methods))
    raw = redis.Redis.from_url(forms_server.url, protocol=3)
    try:
        in_scope = redispy_methods(command_docs(raw))
    finally:
        raw.close()
    skipped = _forms_data_d.SKIPPED
    assert not (methods & skipped.keys()), "a skipped method has forms"
    assert all(hasattr(redis.Redis, m) for m in methods | skipped.keys())
    uncovered = sorted(set(in_scope) - methods - skipped.keys())
    assert not uncovered, f"redis-py methods with no form and no reason: {uncovered}"
    assert all(reason for reason in skipped.values())
    assert all(f.family for f in FORMS)


def test_every_mode_ran(form_results: dict[str, list[Result]]) -> None:
    """Each form ran in the modes its flags allow (the harness skipped nothing silently)."""
    for form, fid in zip(FORMS, IDS, strict=True):
        modes = {r.mode for r in form_results[fid]}
        assert modes == {m for m in MODES if applies(form, m)}, fid


def test_normalisation() -> None:
    """The comparison rules written in tests/_forms.py."""
    assert same((1, [b"a"]), [1, (b"a",)])
    assert not same(True, 1) and not same(1, 1.0) and not same("a", b"a")
    assert same(0.1 + 0.2, 0.3) and not same(0.3, 0.31)
    assert same({"a": [1]}, {"a": (1,)}) and not same({"a": 1}, {"b": 1})
    assert same({1, 2}, frozenset({2, 1})) and not same({1}, [1])
    assert same(float("nan"), float("nan"))
    assert UNORDERED([b"b", b"a"]) == [b"a", b"b"]
    assert SCAN((0, [b"b", b"a"])) == [0, [b"a", b"b"]]
    assert SHAPE({"a": [1, "x"]}) == {"a": ["int", "str"]}
    assert LENGTH([1, 2]) == ("list", 2) and TYPE((1,)) == "list"
    form = call("get", "{t}k")
    assert form.keyed and form.runs_on_cluster and form.text == "get('{t}k')"
    assert not call("ping").runs_on_cluster


def test_verdicts() -> None:
    """How two outcomes become a verdict (absent, raising, a redis-py error form)."""
    from ._forms_run import Outcome

    form = call("get", "{t}k")
    ok = Outcome("ok", b"v")
    assert verdict(form, ok, Outcome("ok", b"v")) == "alike"
    assert verdict(form, ok, Outcome("ok", "v")) == "differs"
    assert verdict(form, ok, Outcome("absent")) == "absent"
    assert verdict(form, ok, Outcome("client-error", "TypeError: x")) == "raises"
    assert verdict(form, Outcome("server-error", "x"), ok) == "bad-form"
    assert verdict(form.differs("why", str.encode), ok, Outcome("ok", "v")) == "deliberate"
    assert verdict(form.differs("why", str.encode), ok, Outcome("ok", "w")) == "differs"
    assert verdict(form.differs("why", str.encode), ok, Outcome("absent")) == "absent"
    assert verdict(form.absent("why"), ok, Outcome("absent")) == "deliberate"
    assert verdict(form.absent("why"), ok, Outcome("ok", b"w")) == "differs"
    assert AS_INT([True, False]) == [1, 0] and AS_INT(True) == 1
    entry = StreamEntry(id=b"1-1", fields={b"f": b"v"})
    assert same(AS_XREAD({b"x": [entry]}), {b"x": [[(b"1-1", {b"f": b"v"})]]})
    err = form.raises()
    assert verdict(err, Outcome("server-error", "m"), Outcome("server-error", "m")) == "alike"
    assert verdict(err, Outcome("server-error", "m x"), Outcome("server-error", "ERR m x")) == (
        "alike"
    )
    nx = "NX and XX are not compatible"
    assert verdict(err, Outcome("server-error", nx), Outcome("server-error", "ERR " + nx)) == (
        "alike"
    )
    assert verdict(err, Outcome("server-error", nx), Outcome("server-error", "ERR other")) == (
        "differs"
    )
    assert verdict(err, Outcome("client-error", "a"), Outcome("client-error", "b")) == "alike"
    assert verdict(err, Outcome("server-error", "m"), Outcome("ok", 1)) == "differs"


@pytest.mark.trio
async def test_watch_then_read_like_redispy(forms_server: RedisServer) -> None:
    """After ``pipe.watch(k)`` a read executes at once (redis-py's immediate mode), then
    ``multi()`` queues; a concurrent change aborts ``execute()`` with WatchError."""
    url = forms_server.url + "/3"
    py = redis.Redis.from_url(url, protocol=3, decode_responses=True)
    try:
        py.flushdb()
        py.set("{t}w", "1")
        with py.pipeline() as pyp:
            pipe: Any = pyp  # redis-py's pipeline methods are partly untyped
            pipe.watch("{t}w")
            py_value = pipe.get("{t}w")
            pipe.multi()
            pipe.set("{t}w", "2")
            py_reply = pipe.execute()
        py.set("{t}w", "1")
        async with trio_maint.open_redis(
            url, decode_responses=True, maintenance=trio_maint.MaintConfig(mode="disabled")
        ) as r:
            async with r.pipeline() as tpipe:
                await tpipe.watch("{t}w")
                immediate: Any = tpipe  # redis-py's typing: a read returns the reply here
                value = await immediate.get("{t}w")
                tpipe.multi()
                tpipe.set("{t}w", "2")
                reply = await tpipe.execute()
            assert (value, reply) == (py_value, py_reply)
            async with r.pipeline() as tpipe:
                await tpipe.watch("{t}w")
                py.set("{t}w", "3")  # another client changes the watched key
                tpipe.multi()
                tpipe.set("{t}w", "4")
                with pytest.raises(trio_maint.WatchError):
                    await tpipe.execute()
    finally:
        py.close()
