"""The sans-IO half of scripting (trio_maint/_sansio/scripts.py): digests, the arguments
of EVALSHA/EVAL, what a transaction sends with its body, and which pipeline replies
are resent."""

from __future__ import annotations

import hashlib

import pytest

from trio_maint import NoScriptError, ResponseError
from trio_maint._sansio.scripts import (
    ScriptCall,
    Stack,
    encode_script,
    first_calls_as_eval,
    is_noscript,
    noscript_indexes,
    script_arguments,
    script_sha,
)


def test_digest_of_str_and_bytes() -> None:
    assert script_sha("return 1") == hashlib.sha1(b"return 1").hexdigest()
    assert script_sha("return 'é'") == script_sha("return 'é'".encode())
    assert script_sha(b"x") == script_sha(bytearray(b"x"))  # type: ignore[arg-type]
    assert encode_script(memoryview(b"ab")) == b"ab"  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str or bytes"):
        encode_script(1)  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        script_sha("\ud800")


def test_script_arguments() -> None:
    assert script_arguments(None, None) == (0,)
    assert script_arguments(["a", b"b"], (1, 2.5)) == (2, "a", b"b", 1, 2.5)
    assert script_arguments((), iter(["x"])) == (0, "x")
    for bad in ("ab", b"ab", bytearray(b"ab"), memoryview(b"ab")):
        with pytest.raises(TypeError, match="keys must be a sequence"):
            script_arguments(bad, None)
        with pytest.raises(TypeError, match="args must be a sequence"):
            script_arguments(None, bad)


def test_noscript_recognised() -> None:
    assert is_noscript(NoScriptError("NOSCRIPT No matching script."))
    assert is_noscript(ResponseError("NOSCRIPT No matching script."))
    assert not is_noscript(ResponseError("ERR Error running script"))
    assert not is_noscript(b"NOSCRIPT")
    assert not is_noscript(None)


def call(name: str) -> ScriptCall:
    body = f"return '{name}'".encode()
    return ScriptCall(body, script_sha(body))


def test_script_call() -> None:
    c = call("a")
    assert c("reply") == "reply"
    command = c.evalsha((1, "k", "v"))
    assert command == ("EVALSHA", c.sha, 1, "k", "v")
    assert c.as_eval(command) == ("EVAL", b"return 'a'", 1, "k", "v")
    assert repr(c) == f"<ScriptCall {c.sha}>"


def test_first_calls_as_eval() -> None:
    a, b = call("a"), call("b")
    untouched: Stack = [(("GET", "k"), None), (("EVALSHA", "0" * 40, 0), None)]
    assert first_calls_as_eval(untouched) is untouched  # nothing to change: no copy
    stack: Stack = [
        (a.evalsha((1, "x")), a),
        (("INCR", "n"), None),
        (a.evalsha((1, "y")), a),
        (b.evalsha((0,)), b),
        (b.evalsha((0,)), b),
    ]
    before = list(stack)
    sent = first_calls_as_eval(stack)
    assert stack == before  # the caller's list is left alone
    assert [args[0] for args, _cb in sent] == ["EVAL", "INCR", "EVALSHA", "EVAL", "EVALSHA"]
    assert sent[0] == (("EVAL", a.body, 1, "x"), a)
    assert sent[3] == (("EVAL", b.body, 0), b)
    assert [cb for _args, cb in sent] == [cb for _args, cb in stack]


def test_noscript_indexes() -> None:
    a = call("a")
    noscript = NoScriptError("NOSCRIPT No matching script.")
    stack: Stack = [
        (a.evalsha((0,)), a),
        (("EVALSHA", a.sha, 0), None),  # queued by hand: no body
        (("GET", "k"), None),
        (a.evalsha((0,)), a),
        (a.evalsha((0,)), a),
    ]
    replies = [noscript, noscript, noscript, 1, ResponseError("ERR script failed")]
    assert noscript_indexes(stack, replies) == [0]
    assert noscript_indexes(stack, [noscript] * 5) == [0, 3, 4]
    with pytest.raises(ValueError):
        noscript_indexes(stack, [noscript])
