"""Calling forms, part D: HyperLogLog, geo, scripting and functions, transactions, server,
connection; and the redis-py methods deliberately left without a form. See tests/_forms.py."""

from __future__ import annotations

import hashlib

from ._forms import KEYS_OF, LENGTH, SHAPE, TYPE, UNORDERED, call, family

P = ("PFADD", "{t}p", "a", "b", "c")
P2 = ("PFADD", "{t}p2", "c", "d")

HYPERLOGLOG = family(
    "hyperloglog",
    [
        call("pfadd", "{t}p", "a", "b").then(("PFCOUNT", "{t}p")),
        call("pfadd", "{t}p", "a").given(P),
        call("pfadd", "{t}p", 1, 2.5, b"x"),
        call("pfcount", "{t}p").given(P),
        call("pfcount", "{t}p", "{t}p2").given(P, P2),
        call("pfcount", "{t}missing"),
        call("pfmerge", "{t}d", "{t}p", "{t}p2").given(P, P2).then(("PFCOUNT", "{t}d")),
        call("pfmerge", "{t}p", "{t}p2").given(P, P2).then(("PFCOUNT", "{t}p")),
    ],
)

G = ("GEOADD", "{t}g", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania")
G3 = ("GEOADD", "{t}g", "12.758489", "38.788135", "edge1", "17.241510", "38.788135", "edge2")
GD = ("ZRANGE", "{t}d", "0", "-1", "WITHSCORES")

GEO = family(
    "geo",
    [
        call("geoadd", "{t}g", [13.361389, 38.115556, "Palermo"]).then(
            ("GEOPOS", "{t}g", "Palermo")
        ),
        call("geoadd", "{t}g", (13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania")),
        call("geoadd", "{t}g", [1, 2, "Palermo"], nx=True).given(G),
        call("geoadd", "{t}g", [1, 2, "Palermo", 3, 4, "new"], xx=True).given(G),
        call("geoadd", "{t}g", [1, 2, "Palermo", 3, 4, "new"], ch=True).given(G),
        call("geoadd", "{t}g", [1, 2]).raises(),
        call("geodist", "{t}g", "Palermo", "Catania").given(G),
        call("geodist", "{t}g", "Palermo", "Catania", "km").given(G),
        call("geodist", "{t}g", "Palermo", "Catania", unit="mi").given(G),
        call("geodist", "{t}g", "Palermo", "nope").given(G),
        call("geohash", "{t}g", "Palermo", "Catania", "nope").given(G),
        call("geohash", "{t}g", "Palermo").given(G),
        call("geopos", "{t}g", "Palermo", "nope").given(G),
        call("geopos", "{t}g", "Catania").given(G),
        call("georadius", "{t}g", 15, 37, 200, "km").given(G),
        call("georadius", "{t}g", 15, 37, 200, unit="km", withdist=True).given(G),
        call("georadius", "{t}g", 15, 37, 200, "km", withcoord=True, withhash=True).given(G),
        call("georadius", "{t}g", 15, 37, 200, "km", withdist=True, sort="ASC").given(G),
        call("georadius", "{t}g", 15, 37, 200, "km", count=1, sort="DESC").given(G),
        call("georadius", "{t}g", 15, 37, 200, "km", count=1, any=True).given(G).norm(LENGTH),
        call("georadius", "{t}g", 15, 37, 200, "km", store="{t}d").given(G).then(GD),
        call("georadius", "{t}g", 15, 37, 200, "km", store_dist="{t}d").given(G).then(GD),
        call("georadiusbymember", "{t}g", "Palermo", 200, "km").given(G, G3),
        call("georadiusbymember", "{t}g", "Palermo", 100, unit="km", withdist=True).given(G, G3),
        call("georadiusbymember", "{t}g", "Palermo", 200, "km", withcoord=True, sort="ASC").given(
            G, G3
        ),
        call("georadiusbymember", "{t}g", "Palermo", 200, "km", store="{t}d").given(G).then(GD),
        call("geosearch", "{t}g", member="Palermo", radius=200, unit="km").given(G, G3),
        call("geosearch", "{t}g", longitude=15, latitude=37, radius=200, unit="km").given(G),
        call(
            "geosearch", "{t}g", longitude=15, latitude=37, width=400, height=400, unit="km"
        ).given(G),
        call("geosearch", "{t}g", member="Palermo", radius=200, unit="km", sort="ASC").given(G, G3),
        call(
            "geosearch", "{t}g", member="Palermo", radius=200, unit="km", withdist=True, count=2
        ).given(G, G3),
        call(
            "geosearch",
            "{t}g",
            longitude=15,
            latitude=37,
            radius=200,
            unit="km",
            withcoord=True,
            withhash=True,
        ).given(G),
        call("geosearch", "{t}g", member="Palermo", radius=200, unit="km", count=1, any=True)
        .given(G, G3)
        .norm(LENGTH),
        call("geosearch", "{t}g", member="Palermo", radius=200000).given(G),
        call("geosearch", "{t}g", radius=200).given(G).raises(),
        call("geosearchstore", "{t}d", "{t}g", member="Palermo", radius=200, unit="km")
        .given(G, G3)
        .then(GD),
        call(
            "geosearchstore",
            "{t}d",
            "{t}g",
            longitude=15,
            latitude=37,
            radius=200,
            unit="km",
            storedist=True,
        )
        .given(G)
        .then(GD),
        call(
            "geosearchstore",
            "{t}d",
            "{t}g",
            member="Palermo",
            width=500,
            height=500,
            unit="km",
            count=2,
            sort="ASC",
        )
        .given(G, G3)
        .then(GD),
    ],
)

LUA_KA = "return {KEYS[1], ARGV[1]}"
LUA_NUM = "return {1, 2, 3.7, 'x', false}"
LUA_MAP = "return redis.call('HGETALL', KEYS[1])"
LUA_ERR = "return redis.error_reply('MYERR boom')"
LUA_GET = "return redis.call('GET', KEYS[1])"
SHA_KA = hashlib.sha1(LUA_KA.encode()).hexdigest()
SHA_GET = hashlib.sha1(LUA_GET.encode()).hexdigest()
LOAD_KA = ("SCRIPT", "LOAD", LUA_KA)
LOAD_GET = ("SCRIPT", "LOAD", LUA_GET)
K = ("SET", "{t}k", "v")
LIB = (
    "#!lua name=flib\n"
    "redis.register_function('fget', function(keys, args) return redis.call('GET', keys[1]) end)\n"
    "redis.register_function{function_name='fro', callback=function(keys, args) "
    "return args[1] end, flags={'no-writes'}}\n"
)
LIB2 = "#!lua name=flib2\nredis.register_function('f2', function(keys, args) return 2 end)\n"
FLOAD = ("FUNCTION", "LOAD", LIB)
FLIST = ("FUNCTION", "LIST")

SCRIPTING = family(
    "scripting",
    [
        call("eval", LUA_KA, 1, "{t}k", "arg"),
        call("eval", LUA_NUM, 0),
        call("eval", LUA_MAP, 1, "{t}h").given(("HSET", "{t}h", "f", "v")),
        call("eval", LUA_GET, 1, "{t}k").given(K),
        call("eval", LUA_ERR, 0).raises(),
        call("eval", "return 1", 0),
        call("eval_ro", LUA_GET, 1, "{t}k").given(K),
        call("eval_ro", "return redis.call('SET', KEYS[1], 'x')", 1, "{t}k").raises(),
        call("evalsha", SHA_KA, 1, "{t}k", "arg").given(LOAD_KA),
        call("evalsha", SHA_KA, 1, "{t}k", "arg").raises(),
        call("evalsha_ro", SHA_GET, 1, "{t}k").given(LOAD_GET, K),
        call("fcall", "fget", 1, "{t}k").given(FLOAD, K),
        call("fcall", "fro", 0, "x").given(FLOAD).nocluster(),
        call("fcall", "nope", 0).raises().nocluster(),
        call("fcall_ro", "fro", 1, "{t}k", "y").given(FLOAD),
        call("fcall_ro", "fget", 1, "{t}k").given(FLOAD, K).raises(),
        call("function_delete", "flib").given(FLOAD).then(FLIST),
        call("function_delete", "nope").raises(),
        call("function_dump").given(FLOAD).norm(TYPE).raw(),
        call("function_flush").given(FLOAD).then(FLIST),
        call("function_flush", "ASYNC").given(FLOAD).then(FLIST),
        call("function_flush", mode="SYNC").given(FLOAD),
        call("function_kill").raises(),
        call("function_list").given(FLOAD),
        call("function_list", "flib").given(FLOAD, ("FUNCTION", "LOAD", LIB2)),
        call("function_list", withcode=True).given(FLOAD),
        call("function_list", library="nope").given(FLOAD),
        call("function_load", LIB).then(FLIST),
        call("function_load", LIB, replace=True).given(FLOAD),
        call("function_load", LIB).given(FLOAD).raises(),
        call("function_stats").given(FLOAD).norm(SHAPE),
        call("script_exists", SHA_KA, SHA_GET).given(LOAD_KA),
        call("script_exists", SHA_KA).given(LOAD_KA),
        call("script_flush").given(LOAD_KA).then(("SCRIPT", "EXISTS", SHA_KA)),
        call("script_flush", "ASYNC").given(LOAD_KA),
        call("script_flush", sync_type="SYNC").given(LOAD_KA),
        call("script_kill").raises(),
        call("script_load", LUA_KA).then(("SCRIPT", "EXISTS", SHA_KA)),
        call("script_load", LUA_GET),
    ],
)

# trio_maint's documented exclusions (docs/commands.md, "Not methods")
ON_PIPELINE = "WATCH/UNWATCH only mean something on a transaction's connection: Pipeline.watch()"
DEBUG = "DEBUG is off by default and can crash the server: execute_command('DEBUG', ...)"
AUTH = "credentials go in the URL or ClientOptions, sent on every new pooled connection"
TRACKING = "client-side caching needs its own connection and invalidation handling"

TRANSACTIONS = family(
    "transactions",
    [
        call("watch", "{t}k").given(K).solo().nocluster().absent(ON_PIPELINE),
        call("watch", "{t}k", "{t}j").solo().nocluster().absent(ON_PIPELINE),
        call("unwatch").solo().absent(ON_PIPELINE),
    ],
)

SERVER = family(
    "server",
    [
        call("acl_cat"),
        call("acl_cat", "string").norm(UNORDERED),
        call("acl_dryrun", "default", "get", "{t}k").nocluster(),
        call("acl_genpass").norm(LENGTH),
        call("acl_genpass", 64).norm(LENGTH),
        call("acl_getuser", "default"),
        call("acl_help"),
        call("acl_getuser", "nobody"),
        call("acl_list"),
        call("acl_log").given(("ACL", "LOG", "RESET")),
        call("acl_log", count=1).given(("ACL", "LOG", "RESET")),
        call("acl_log_reset"),
        call("acl_users"),
        call("acl_whoami"),
        call("acl_setuser", "u1").then(("ACL", "DELUSER", "u1")),
        call("acl_setuser", "u1", enabled=True, nopass=True, commands=["+get"], keys=["{t}*"])
        .then(("ACL", "GETUSER", "u1"), ("ACL", "DELUSER", "u1"))
        .nocluster(),
        call("acl_deluser", "u1").given(("ACL", "SETUSER", "u1")),
        call("acl_deluser", "u1", "u2").given(("ACL", "SETUSER", "u1")),
        call("acl_load").raises(),
        call("acl_save").raises(),
        call("command").norm(KEYS_OF),
        call("command_count"),
        call("command_getkeys", "MSET", "a", "1", "b", "2"),
        call("command_getkeysandflags", "LMOVE", "a", "b", "LEFT", "RIGHT"),
        call("command_list"),
        call("command_list", category="hyperloglog").norm(UNORDERED),
        call("command_list", pattern="z*").norm(UNORDERED),
        call("command_list", module="nope"),
        call("config_get", "maxmemory"),
        call("config_get", "maxmemory*"),
        call("config_get", "maxmemory", "timeout"),
        call("config_get").norm(KEYS_OF),
        call("config_set", "maxmemory-samples", 6).then(
            ("CONFIG", "GET", "maxmemory-samples"), ("CONFIG", "SET", "maxmemory-samples", "5")
        ),
        call("config_set", "nope", 1).raises(),
        call("config_resetstat"),
        call("config_rewrite").raises(),
        call("dbsize").given(K, ("SET", "{t}j", "1")),
        call("dbsize"),
        call("debug_object", "{t}k").given(K).norm(KEYS_OF).nocluster().absent(DEBUG),
        call("flushall").given(K).then(("DBSIZE",)),
        call("flushdb").given(K).then(("DBSIZE",)),
        call("flushdb", asynchronous=True).given(K),
        call("info").norm(KEYS_OF),
        call("info", "server").norm(KEYS_OF),
        call("info", "keyspace").given(K),
        call("info", "clients", "memory").norm(KEYS_OF),
        call("info", section="persistence").norm(KEYS_OF),
        call("lastsave").norm(TYPE),
        call("latency_history", "command"),
        call("latency_latest"),
        call("latency_reset"),
        call("latency_reset", "command"),
        call("lolwut").norm(TYPE),
        call("lolwut", 5, 10).norm(TYPE),
        call("memory_malloc_stats").norm(TYPE),
        call("memory_purge"),
        call("memory_stats").norm(KEYS_OF),
        # cluster nodes account more memory per key: the standalone reference does not apply
        call("memory_usage", "{t}k").given(K).nocluster(),
        call("memory_usage", "{t}k", samples=0).given(K).nocluster(),
        call("memory_usage", "{t}missing"),
        call("module_list"),
        call("role").norm(SHAPE),
        call("save").solo(),  # not allowed inside MULTI
        call("slowlog_get").given(("SLOWLOG", "RESET")),
        call("slowlog_get", 1).given(("SLOWLOG", "RESET")),
        call("slowlog_len").given(("SLOWLOG", "RESET")),
        call("slowlog_reset"),
        call("swapdb", 1, 2),
        call("time").norm(SHAPE),
    ],
)

CONNECTION = family(
    "connection",
    [
        call("auth", "wrong").raises().solo().absent(AUTH),
        call("auth", "wrong", "nobody").raises().solo().absent(AUTH),
        call("client_getname").solo(),
        call("client_setname", "form-client").solo(),
        call("client_getredir"),
        call("client_id").norm(TYPE),
        call("client_info").norm(KEYS_OF),
        call("client_list").norm(TYPE),
        call("client_list", _type="pubsub"),
        call("client_list", "normal").norm(TYPE),
        call("client_kill", "1.2.3.4:5").raises(),
        call("client_kill_filter", _id="999999"),
        call("client_kill_filter", _type="pubsub"),
        call("client_kill_filter", addr="1.2.3.4:5", skipme=True),
        call("client_no_evict", "off"),
        call("client_pause", 10),
        call("client_pause", 10, all=False),
        call("client_pause", timeout=10, all=True),
        call("client_unpause"),
        call("client_tracking", False).solo().absent(TRACKING),
        call("client_tracking_off").solo().absent(TRACKING),
        call("client_trackinginfo"),
        call("client_unblock", 999999),
        call("client_unblock", 999999, error=True),
        call("echo", "hi"),
        call("echo", b"bytes"),
        call("echo", 5),
        call("ping"),
    ],
)

FORMS = [*HYPERLOGLOG, *GEO, *SCRIPTING, *TRANSACTIONS, *SERVER, *CONNECTION]

#: redis-py methods of the covered families with no form, and why
SKIPPED = {
    "bitfield": "returns a BitFieldOperation builder (`.incrby(...).execute()`), not a reply",
    "migrate": "needs a second server and moves keys away",
    "monitor": "a stream of every command the server runs (a context manager, not a reply)",
    "sync": "the replication stream",
    "psync": "the replication stream",
    "replicaof": "makes the server a replica",
    "slaveof": "makes the server a replica",
    "shutdown": "stops the server",
    "failover": "redis-py raises NotImplementedError; needs replicas",
    "bgsave": "a background job: the second side's call races the first's",
    "bgrewriteaof": "a background job: the second side's call races the first's",
    "module_load": "needs a module binary",
    "module_loadex": "needs a module binary",
    "module_unload": "needs a loaded module",
    "command_docs": "redis-py raises NotImplementedError",
    "command_info": "redis-py raises NotImplementedError",
    "hello": "redis-py raises NotImplementedError",
    "latency_doctor": "redis-py raises NotImplementedError",
    "latency_graph": "redis-py raises NotImplementedError",
    "latency_histogram": "redis-py raises NotImplementedError",
    "memory_doctor": "redis-py raises NotImplementedError",
    "memory_help": "redis-py raises NotImplementedError",
    "script_debug": "redis-py raises NotImplementedError (an interactive debugger)",
    "client": "redis-py's `client()` returns a new client object, it is no command",
    "client_reply": "OFF/SKIP leave a request without a reply: breaks any pooled client",
    "client_tracking_on": "RESP3 invalidation pushes then arrive on a pooled connection",
    "select": "changes the database of one pooled connection (both libraries say: use db=)",
    "reset": "resets the connection (protocol back to RESP2, database 0, name): pool state",
    "quit": "closes the connection under the pool",
    "function_restore": "needs a FUNCTION DUMP payload of the same server version",
}
