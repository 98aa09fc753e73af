"""The client-side cache's sans-IO core: which commands are cached, the bounded store
(LRU by entries and bytes, TTL, invalidation, late replies kept out) and the maintenance
decisions of :class:`CacheMachine` (plain function calls, no Trio)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from trio_maint._sansio.cache import (
    MALFORMED,
    NOT_INVALIDATION,
    CacheStore,
    copy_reply,
    entry_size,
    parse_invalidation,
)
from trio_maint._sansio.cache_config import (
    CACHEABLE_COMMANDS,
    NOT_CACHED,
    CacheConfig,
    cache_request,
)
from trio_maint._sansio.cache_machine import (
    STABLE_AFTER,
    WINDOW_BACKSTOP,
    CacheMachine,
    CachePhase,
    Connect,
    Disable,
    DropTracking,
    Flushed,
    Verify,
)
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    SlotMove,
    SMigrated,
)
from trio_maint._sansio.slots import key_slot

ISSUE_LIST = {"GET", "HGET", "HGETALL", "HMGET", "SMEMBERS", "SISMEMBER", "LRANGE"}
ISSUE_LIST |= {"ZRANGE", "ZSCORE", "EXISTS", "STRLEN", "TYPE"}


# ------------------------------------------------------------------ cacheable commands


def test_cacheable_commands_cover_the_issue_list_and_leave_out_time_and_randomness() -> None:
    assert ISSUE_LIST <= CACHEABLE_COMMANDS
    assert not NOT_CACHED & CACHEABLE_COMMANDS
    for name in ("SET", "INCR", "BLPOP", "XREAD", "EVAL_RO", "KEYS", "SCAN", "SORT_RO"):
        assert name not in CACHEABLE_COMMANDS


def test_cache_request_normalizes_arguments() -> None:
    assert cache_request(("GET", "k")) == (("GET", b"k"), (b"k",))
    assert cache_request((b"get", b"k")) == cache_request(("GET", "k"))
    assert cache_request(("HGET", "h", 1)) == (("HGET", b"h", b"1"), (b"h",))
    assert cache_request(("ZSCORE", "z", 1.5)) == (("ZSCORE", b"z", b"1.5"), (b"z",))
    assert cache_request(("MGET", "a", "b")) == (("MGET", b"a", b"b"), (b"a", b"b"))
    assert cache_request(("ZUNION", 2, "a", "b"))[1] == (b"a", b"b")  # type: ignore[index]


@pytest.mark.parametrize(
    "args",
    [("SET", "k", "v"), ("GET",), ("GET", "a", "b"), ("GET", True), ("GET", None), (), (1,)],
)
def test_cache_request_refuses(args: tuple[Any, ...]) -> None:
    assert cache_request(args) is None


def test_allow_list_narrows() -> None:
    config = CacheConfig(allow_list=["get", b"HGET"])
    assert config.allow_list == frozenset({"GET", "HGET"})
    assert cache_request(("LRANGE", "l", 0, -1), config.allow_list) is None
    with pytest.raises(ValueError, match="not cacheable: SET"):
        CacheConfig(allow_list=["SET"])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_size": 0}, ValueError),
        ({"max_size": True}, TypeError),
        ({"max_bytes": -1}, ValueError),
        ({"ttl": 0}, ValueError),
        ({"ttl": float("nan")}, ValueError),
        ({"ttl": "1"}, TypeError),
        ({"mode": "optin"}, ValueError),
        ({"prefixes": ["a"]}, ValueError),  # prefixes without bcast
        ({"prefixes": [1], "mode": "bcast"}, TypeError),
        ({"health_check_interval": 0}, ValueError),
    ],
)
def test_config_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        CacheConfig(**kwargs)


def test_tracking_commands() -> None:
    assert CacheConfig().tracking_command() == ("CLIENT", "TRACKING", "ON", "OPTIN")
    bcast = CacheConfig(mode="bcast", prefixes=["user:", b"item:"])
    assert bcast.tracking_command() == (
        "CLIENT",
        "TRACKING",
        "ON",
        "BCAST",
        "PREFIX",
        b"user:",
        "PREFIX",
        b"item:",
    )


# ----------------------------------------------------------------------------- store


def _store(**kwargs: Any) -> CacheStore:
    return CacheStore(CacheConfig(**kwargs))


def _put(store: CacheStore, key: str, value: Any, now: float = 0.0) -> bool:
    request = cache_request(("GET", key))
    assert request is not None
    ticket = store.begin_read(*request)
    return store.finish_read(ticket, value, now)


def _get(store: CacheStore, key: str, now: float = 0.0) -> tuple[bool, Any]:
    request = cache_request(("GET", key))
    assert request is not None
    return store.get(request[0], now)


def test_hit_miss_and_stats() -> None:
    store = _store()
    assert _get(store, "a") == (False, None)
    assert _put(store, "a", b"1")
    assert _get(store, "a") == (True, b"1")
    stats = store.stats()
    assert (stats.hits, stats.misses, stats.stores, stats.entries) == (1, 1, 1, 1)
    assert stats.bytes == entry_size(("GET", b"a"), b"1") > 0
    assert stats.hit_ratio == 0.5


def test_lru_eviction_by_entries() -> None:
    store = _store(max_size=2)
    _put(store, "a", b"1")
    _put(store, "b", b"2")
    assert _get(store, "a")[0]  # a is now the most recently used
    _put(store, "c", b"3")
    assert _get(store, "b") == (False, None)
    assert _get(store, "a")[0] and _get(store, "c")[0]
    assert store.stats().evictions == 1


def test_eviction_by_bytes_and_oversized_reply() -> None:
    one = entry_size(("GET", b"a"), b"x" * 100)
    store = _store(max_bytes=2 * one + 10)
    _put(store, "a", b"x" * 100)
    _put(store, "b", b"x" * 100)
    _put(store, "c", b"x" * 100)
    assert len(store) == 2 and store.total_bytes <= 2 * one + 10
    assert store.stats().evictions == 1
    assert not _put(store, "d", b"x" * 10_000)  # larger than max_bytes: never stored
    assert store.stats().not_stored == 1


def test_ttl() -> None:
    store = _store(ttl=1.5)
    _put(store, "a", b"1", now=10.0)
    assert _get(store, "a", now=11.0)[0]
    assert _get(store, "a", now=11.5) == (False, None)
    assert store.stats().expirations == 1 and len(store) == 0


def test_invalidation_removes_every_entry_reading_the_key() -> None:
    store = _store()
    _put(store, "a", b"1")
    request = cache_request(("MGET", "a", "b"))
    assert request is not None
    store.finish_read(store.begin_read(*request), [b"1", b"2"], 0.0)
    request = cache_request(("STRLEN", "a"))
    assert request is not None
    store.finish_read(store.begin_read(*request), 1, 0.0)
    assert len(store) == 3
    assert store.invalidate([b"a"]) == 3
    assert len(store) == 0 and store.total_bytes == 0
    assert store.stats().invalidations == 3


def test_late_reply_is_not_stored() -> None:
    """A read sent before an invalidation of its key, answered after it, keeps the old
    value: it must not be stored; a read that began after the invalidation is."""
    store = _store()
    request = cache_request(("GET", "k"))
    assert request is not None
    early = store.begin_read(*request)
    store.invalidate([b"k"])
    late = store.begin_read(*request)
    assert not store.finish_read(early, b"old", 0.0)
    assert store.finish_read(late, b"new", 0.0)
    assert store.get(request[0], 0.0) == (True, b"new")
    assert store.reads_in_flight() == 0


def test_flush_spoils_reads_in_flight_and_abandon_releases() -> None:
    store = _store()
    request = cache_request(("GET", "k"))
    assert request is not None
    ticket = store.begin_read(*request)
    other = store.begin_read(*request)
    store.flush("moving")
    assert not store.finish_read(ticket, b"v", 0.0)
    store.abandon_read(other)
    assert store.reads_in_flight() == 0
    assert store.stats().flushes == {"moving": 1}


def test_slot_flush() -> None:
    store = _store()
    for key in ("a", "b", "c"):
        request = cache_request(("GET", key))
        assert request is not None
        store.finish_read(store.begin_read(*request, slot=key_slot(key)), b"v", 0.0)
    assert store.flush("slot_moved", slots=[key_slot("b")]) == 1
    assert not _get(store, "b")[0] and _get(store, "a")[0] and _get(store, "c")[0]


def test_copy_reply_protects_the_cache() -> None:
    value = [b"a", {b"k": [b"v"]}, {b"s"}]
    copied = copy_reply(value)
    assert copied == value and copied is not value
    copied[1][b"k"].append(b"x")
    assert value[1] == {b"k": [b"v"]}
    assert copy_reply(b"x") is not None


def test_entry_size_of_a_deep_reply_does_not_recurse() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert entry_size(("GET", b"k"), deep) > 100_000


class StoreModel(RuleBasedStateMachine):
    """Random reads, replies, invalidations and flushes: the bounds always hold, the
    byte count is exact, and no entry holds a value older than an invalidation that
    came after its read began."""

    def __init__(self) -> None:
        super().__init__()
        self.store = _store(max_size=5, max_bytes=2000, ttl=10.0)
        self.now = 0.0
        self.version: dict[bytes, int] = {}
        self.inflight: list[tuple[Any, int]] = []

    keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g"])

    @rule(key=keys)
    def begin(self, key: bytes) -> None:
        request = cache_request(("GET", key))
        assert request is not None
        self.inflight.append((self.store.begin_read(*request), self.version.get(key, 0)))

    @rule(index=st.integers(0, 20), size=st.integers(0, 400))
    def finish(self, index: int, size: int) -> None:
        if self.inflight:
            ticket, version = self.inflight.pop(index % len(self.inflight))
            self.store.finish_read(ticket, (version, b"x" * size), self.now)

    @rule(index=st.integers(0, 20))
    def abandon(self, index: int) -> None:
        if self.inflight:
            ticket, _ = self.inflight.pop(index % len(self.inflight))
            self.store.abandon_read(ticket)

    @rule(key=keys)
    def write(self, key: bytes) -> None:
        self.version[key] = self.version.get(key, 0) + 1
        self.store.invalidate([key])

    @rule()
    def flush(self) -> None:
        self.store.flush("test")

    @rule(key=keys)
    def read(self, key: bytes) -> None:
        hit, value = self.store.get(("GET", key), self.now)
        if hit:
            assert value[0] == self.version.get(key, 0)  # never older than a write

    @rule(dt=st.floats(0, 6))
    def tick(self, dt: float) -> None:
        self.now += dt

    @invariant()
    def bounded(self) -> None:
        store = self.store
        assert len(store) <= 5 and store.total_bytes <= 2000
        entries = store._entries
        assert store.total_bytes == sum(e.size for e in entries.values())
        indexed = set()
        for value in store._index.values():
            indexed |= value if isinstance(value, set) else {value}
        assert indexed == set(entries)
        assert store.reads_in_flight() <= len({t.keys for t, _ in self.inflight})


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@given(st.lists(st.binary(max_size=50), max_size=30))
def test_size_grows_with_the_reply(items: list[bytes]) -> None:
    assert entry_size(("LRANGE", b"l"), items) >= entry_size(("LRANGE", b"l"), [])


# ----------------------------------------------------------------------------- machine


def _ready(**kwargs: Any) -> CacheMachine:
    machine = CacheMachine(CacheConfig(**kwargs))
    assert machine.start(0.0) == [Connect(0.0)]
    assert machine.connected(0.0) == []
    assert machine.serving
    return machine


def _fill(machine: CacheMachine, key: str = "k") -> None:
    request = cache_request(("GET", key))
    assert request is not None
    ticket = machine.begin(*request)
    assert ticket is not None
    assert machine.finish(ticket, b"v", 0.0)


def test_machine_serves_only_when_ready() -> None:
    machine = CacheMachine(CacheConfig())
    request = cache_request(("GET", "k"))
    assert request is not None
    assert machine.begin(*request) is None  # DOWN: bypassed
    assert machine.stats().bypassed == 1
    machine.start(0.0)
    assert machine.phase is CachePhase.CONNECTING and not machine.serving
    machine.connected(0.0)
    _fill(machine)
    assert machine.lookup(request[0], 0.0) == (True, b"v")


def test_lost_flushes_and_reconnects_with_backoff() -> None:
    machine = _ready()
    _fill(machine)
    actions = machine.lost(1.0)
    assert actions == [DropTracking("tracking_lost"), Flushed("tracking_lost", 1), Connect(1.0)]
    assert not machine.serving
    assert machine.connect_failed(1.0) == [Connect(1.1)]
    assert machine.connect_failed(1.1) == [Connect(1.1 + 0.2)]
    for _ in range(20):
        (action,) = machine.connect_failed(2.0)
    assert action == Connect(2.0 + 5.0)
    machine.connected(3.0)
    assert machine.lost(4.0)[-1] == Connect(4.0)  # the first retry after a loss: at once


def test_a_connection_lost_at_once_keeps_backing_off() -> None:
    # CLIENT CACHING refused at every miss (an ACL without client|caching): each new
    # tracking connection is set up, then lost at its first read. The backoff must grow,
    # not restart at 0 with every setup (a redial per read).
    machine = _ready()
    now, delays = 1.0, []
    for _ in range(10):
        (connect,) = [a for a in machine.caching_refused(now) if isinstance(a, Connect)]
        delays.append(round(connect.at - now, 3))
        now = connect.at
        machine.connected(now)
        now += 0.001
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    machine.connected(now)
    assert machine.lost(now + STABLE_AFTER)[-1] == Connect(now + STABLE_AFTER)  # it had worked


def test_caching_refused_counts_server_changed() -> None:
    machine = _ready()
    _fill(machine)
    actions = machine.caching_refused(1.0)
    assert Flushed("server_changed", 1) in actions and Connect(1.0) in actions


def test_moving_and_handoff_flush() -> None:
    machine = _ready()
    _fill(machine)
    endpoint = Endpoint("127.0.0.2", 6379)
    assert machine.notification(Moving(1, 15.0, endpoint), 1.0) == [Flushed("moving", 1)]
    assert machine.serving  # misses are verified on the connection (CLIENT CACHING)
    _fill(machine)
    assert machine.handed_off(2.0) == [Flushed("handoff", 1)]
    assert machine.serving


@pytest.mark.parametrize(
    ("opening", "closing"),
    [(Migrating(1), Migrated(2)), (FailingOver(1), FailedOver(2))],
)
def test_window_bypasses_until_closed_and_verified(opening: Any, closing: Any) -> None:
    machine = _ready(health_check_interval=1000.0)
    _fill(machine)
    causes = {Migrating: "migrating", FailingOver: "failing_over"}
    causes |= {Migrated: "migrated", FailedOver: "failed_over"}
    assert machine.notification(opening, 1.0) == [Flushed(causes[type(opening)], 1)]
    assert not machine.serving and machine.window_open
    assert machine.next_wake == 1.0 + WINDOW_BACKSTOP
    actions = machine.notification(closing, 2.0)
    assert actions == [Flushed(causes[type(closing)], 0), Verify()]
    assert machine.phase is CachePhase.VERIFYING and not machine.serving
    assert machine.verified(True, 2.1) == []
    assert machine.serving


def test_window_backstop_and_failed_check() -> None:
    machine = _ready()
    machine.notification(Migrating(1), 1.0)
    actions = machine.timer(1.0 + WINDOW_BACKSTOP)
    assert Flushed("window_backstop", 0) in actions and Verify() in actions
    actions = machine.verified(False, 70.0)
    assert DropTracking("server_changed") in actions and Connect(70.0) in actions


def test_health_checks() -> None:
    machine = _ready(health_check_interval=2.0)
    assert machine.next_wake == 2.0
    assert machine.timer(1.0) == []
    assert machine.timer(2.0) == [Verify()]
    assert machine.timer(3.0) == []  # one check at a time
    machine.verified(True, 3.0)
    assert machine.next_wake == 5.0


def test_null_invalidation_and_smigrated() -> None:
    machine = CacheMachine(CacheConfig(), slots=True)
    machine.start(0.0)
    machine.connected(0.0)
    for key in ("a", "b"):
        request = cache_request(("GET", key))
        assert request is not None
        ticket = machine.begin(*request, slot=key_slot(key))
        assert ticket is not None
        machine.finish(ticket, b"v", 0.0)
    slot = str(key_slot("a"))
    moved = SMigrated(5, (SlotMove("127.0.0.1:1", "127.0.0.1:2", (slot,)),))
    assert machine.notification(moved, 1.0) == [Flushed("slot_moved", 1)]
    assert machine.invalidation(None) == [Flushed("server_flush", 1)]
    assert len(machine.store) == 0


def test_a_malformed_invalidation_flushes() -> None:
    """Which keys an unreadable invalidation meant is unknown: everything goes, reads in
    flight included."""
    machine = _ready()
    _fill(machine, "a")
    request = cache_request(("GET", "b"))
    assert request is not None
    in_flight = machine.begin(*request)
    assert in_flight is not None
    assert machine.malformed_invalidation() == [Flushed("malformed_invalidation", 1)]
    assert not machine.finish(in_flight, b"v", 0.0)
    assert len(machine.store) == 0 and machine.serving


def test_refused_disables() -> None:
    machine = _ready()
    _fill(machine)
    actions = machine.refused("NOPERM")
    assert actions[0] == Disable("NOPERM") and Flushed("disabled", 1) in actions
    assert machine.phase is CachePhase.DISABLED and not machine.serving
    assert machine.lost(1.0) == [] and machine.connect_failed(1.0) == []
    assert machine.connected(1.0) == [DropTracking("caching is disabled")]


def test_a_new_tracking_connection_flushes_what_the_old_one_read() -> None:
    """A handoff installed one tracking connection and a reconnection another: the
    entries read on the first lose their tracking when it is replaced."""
    machine = _ready()
    _fill(machine)
    assert machine.connected(1.0) == [Flushed("replaced", 1)]
    assert machine.serving and len(machine.store) == 0


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ([b"invalidate", [b"a", b"b"]], [b"a", b"b"]),
        (["invalidate", ["a", "\udcff"]], [b"a", b"\xff"]),  # decode_responses, undecodable
        ([b"invalidate", None], None),
        ([b"invalidate", []], []),
        ([b"invalidate", 5], MALFORMED),
        ([b"invalidate", [1]], MALFORMED),
        ([b"invalidate"], MALFORMED),
        ([b"invalidate", [b"a"], b"extra"], MALFORMED),
        ([b"message", b"ch", b"x"], NOT_INVALIDATION),
        ([b"MOVING", 1, 15, b"h:1"], NOT_INVALIDATION),
        ([], NOT_INVALIDATION),
    ],
)
def test_parse_invalidation(frame: list[Any], expected: Any) -> None:
    assert parse_invalidation(frame) == expected or parse_invalidation(frame) is expected


def test_docs_list_the_cacheable_commands() -> None:
    """docs/caching.md lists exactly CACHEABLE_COMMANDS (between its markers)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "caching.md").read_text()
    listed = text.split("<!-- cacheable-commands -->")[1].split("<!-- /cacheable-commands -->")[0]
    assert set(re.findall(r"`([A-Z_]+)`", listed)) == CACHEABLE_COMMANDS


def test_a_long_invalidation_is_handled_in_bulk() -> None:
    """An invalidation naming more keys than the store holds or reads: the keys that
    matter are found in C, with the same outcome as key by key."""
    store = _store()
    for key in ("a", "b", "c"):
        _put(store, key, b"1")
    request = cache_request(("GET", "d"))
    assert request is not None
    in_flight = store.begin_read(*request)
    names = [b"x%d" % i for i in range(10_000)] + [b"a", b"d", b"a"]
    frame: list[Any] = [b"invalidate", names]
    keys = parse_invalidation(frame)
    assert keys is names  # all bytes: not copied
    assert store.invalidate(keys) == 1
    assert ("GET", b"a") not in store and ("GET", b"b") in store and len(store) == 2
    assert not store.finish_read(in_flight, b"old", 0.0)
    assert store.stats().invalidations == 1
    # Decoded keys are encoded back; anything else in a long list is malformed.
    assert parse_invalidation([b"invalidate", [*names[:100], "b"]]) == [*names[:100], b"b"]
    assert parse_invalidation([b"invalidate", [*names[:100], 5]]) is MALFORMED
