"""The redis-py side-by-side report: ``python -m tests._forms_report [options]``.

Starts its own redis-server (``trio_maint.testing.RedisServer``, a free loopback port) and,
with ``--cluster``, its own 3-master ``LocalCluster``; runs every calling form of
tests/_forms_data*.py through redis-py and trio_maint (tests/_forms_run.py) and prints, per
family, how many forms are answered alike, deliberately differently (documented), differently,
by raising, or not at all (method absent); then each failing form with both replies.

Options:

* ``--cluster``: also run the single-slot forms on ``RedisCluster``;
* ``--write``: replace the generated table in docs/compatibility.md;
* ``--quiet``: the summary only, not the failing forms;
* ``--family NAME`` / ``--method NAME``: only those forms (repeatable).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
from collections.abc import Sequence

import trio

from trio_maint._sansio.slots import key_slot
from trio_maint.testing import LocalCluster, RedisServer

from ._forms_run import MODES, VERDICTS, Result, Targets, all_forms, run_all

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
BEGIN = "<!-- forms-report: begin (python -m tests._forms_report --write) -->"
END = "<!-- forms-report: end -->"
FAILING = ("differs", "raises", "absent", "bad-form")


def summary(results: Sequence[Result]) -> str:
    """The per-family table (Markdown) of the ``decoded`` mode, and the other modes' alike
    counts."""
    direct = [r for r in results if r.mode == "decoded"]
    families: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    methods: dict[str, set[str]] = collections.defaultdict(set)
    absent: dict[str, set[str]] = collections.defaultdict(set)
    for r in direct:
        families[r.form.family][r.verdict] += 1
        methods[r.form.family].add(r.form.method)
        if r.verdict == "absent":
            absent[r.form.family].add(r.form.method)
    other: dict[tuple[str, str], collections.Counter[bool]] = collections.defaultdict(
        collections.Counter
    )
    for r in results:
        if r.mode != "decoded":
            other[r.mode, r.form.family][r.verdict in ("alike", "deliberate")] += 1
    modes = [m for m in MODES[1:] if any(k[0] == m for k in other)]
    head = ["family", "forms", "methods", *VERDICTS, "ok %", *(f"{m} ok" for m in modes)]
    lines = [
        "Forms and verdicts of the decoded mode (ok: alike or deliberate); each other"
        " mode's column: the forms ok out of those run in that mode.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    total: collections.Counter[str] = collections.Counter()
    totals_other: dict[str, collections.Counter[bool]] = collections.defaultdict(
        collections.Counter
    )
    all_methods: set[str] = set()
    for fam in families:
        c = families[fam]
        n = sum(c.values())
        total.update(c)
        all_methods |= methods[fam]
        cells = [fam, str(n), str(len(methods[fam])), *(str(c[v]) for v in VERDICTS)]
        cells.append(f"{100 * (c['alike'] + c['deliberate']) / n:.1f} %")
        for m in modes:
            o = other[m, fam]
            totals_other[m].update(o)
            cells.append(f"{o[True]}/{o[True] + o[False]}" if o else "-")
        lines.append("| " + " | ".join(cells) + " |")
    n = sum(total.values())
    cells = ["**all**", str(n), str(len(all_methods)), *(str(total[v]) for v in VERDICTS)]
    cells.append(f"{100 * (total['alike'] + total['deliberate']) / max(n, 1):.1f} %")
    for m in modes:
        o = totals_other[m]
        cells.append(f"{o[True]}/{o[True] + o[False]}")
    lines.append("| " + " | ".join(cells) + " |")
    missing = sorted(set().union(*absent.values())) if absent else []
    if missing:
        lines.append("")
        lines.append(f"Methods absent ({len(missing)}): " + ", ".join(f"`{m}`" for m in missing))
    return "\n".join(lines)


def deliberate_table(results: Sequence[Result]) -> str:
    """The documented deliberate differences, one line per form."""
    seen = {}
    for r in results:
        reason = r.form.deliberate or (r.form.excluded and f"no method: {r.form.excluded}")
        if reason and r.form_id not in seen:
            seen[r.form_id] = reason
    if not seen:
        return "No deliberate differences are documented at present."
    lines = ["| form | reason |", "|---|---|"]
    lines += [f"| `{fid}` | {why} |" for fid, why in seen.items()]
    return "\n".join(lines)


def failures(results: Sequence[Result]) -> str:
    """Every failing (form, mode): the form, our outcome, redis-py's."""
    return "\n".join(r.explain() for r in results if r.verdict in FAILING)


def write_doc(results: Sequence[Result]) -> None:
    """Replace the generated part of docs/compatibility.md."""
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    body = "\n\n" + summary(results) + "\n\n" + deliberate_table(results) + "\n\n"
    DOC.write_text(text[:start] + body + text[end:])


async def _run(args: argparse.Namespace) -> list[Result]:
    forms = [
        f
        for f in all_forms()
        if (not args.family or f.family in args.family)
        and (not args.method or f.method in args.method)
    ]
    modes = MODES if args.cluster else MODES[:3]  # the cluster modes come last
    with RedisServer(extra_args=("--enable-debug-command", "local")) as server:
        if not args.cluster:
            return await run_all(Targets(server.url), forms, modes)
        async with LocalCluster(masters=3, replicas=0) as cluster:
            node = cluster.master_of_slot(key_slot("{t}"))
            targets = Targets(server.url, cluster.url, node.server.url)
            return await run_all(targets, forms, modes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests._forms_report")
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--family", action="append", default=[])
    parser.add_argument("--method", action="append", default=[])
    args = parser.parse_args(argv)
    results = trio.run(_run, args)
    if not args.quiet:
        print(failures(results))
        print()
    print(summary(results))
    if args.write:
        write_doc(results)
        print(f"\nwritten: {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
