"""Exporting and importing a user's memory (SPEC J4) against raw cursor reads and inserts.

``python -m bench.export`` starts its own MongoDB-compatible server (as the tests do)
and writes ``bench/results/export.md``. A user with M memories (a fifth of them
updated once, so 1.2·M versions, and as many decision-log entries) is seeded through
:meth:`MemoryStore.reconcile` with the hashing stand-in embedder (not a model). Then,
rounds alternating:

* **export**: :func:`mongomem.ltm.export.export_lines` of the user, every line
  encoded to UTF-8 and dropped — against **raw read**: the same two cursors
  (versions, decisions) read with no formatting;
* **import**: :func:`mongomem.ltm.export.import_lines` of that export into a fresh
  user (parse, check, relocate, write hidden, commit) — against **raw insert**:
  ``insert_many`` of the same documents, already decoded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.report import publish
from mongomem.adapters.mongo import DECISIONS, MEMORIES, connect
from mongomem.erasure.register import ErasureRegister
from mongomem.local.infra import start_servers
from mongomem.ltm import MemoryStore
from mongomem.ltm.export import export_lines, import_lines
from mongomem.ltm.testing import candidate
from mongomem.models import MemoryScope
from mongomem.settings import MongoSettings, load_settings

RESULTS = Path(__file__).resolve().parent / "results" / "export.md"
SOURCE = MemoryScope(project_id="bench", user_id="alice")


async def seed(store: MemoryStore, memories: int) -> None:
    for m in range(memories):
        text = f"Fact {m} is {m * 7}."
        await store.reconcile(
            candidate(
                "semantic",
                project_id="bench",
                user_id="alice",
                snapshot=f"snap-{m // 10}",
                position=m % 10,
                label=f"fact-{m}",
                text=text,
            )
        )
    for m in range(0, memories, 5):
        await store.reconcile(
            candidate(
                "semantic",
                project_id="bench",
                user_id="alice",
                snapshot=f"snap-u{m}",
                label=f"fact-{m}",
                text=f"Fact {m} is now {m * 11}.",
            )
        )


async def timed_export(db: Any) -> tuple[float, list[str], int]:
    started = time.perf_counter()
    lines, size = [], 0
    async for line in export_lines(
        db, SOURCE, ("stand-in:hashing-64 (NOT a model)", 64), version="bench"
    ):
        size += len(line.encode("utf-8"))
        lines.append(line)
    return time.perf_counter() - started, lines, size


async def raw_read(db: Any) -> tuple[float, list[dict[str, Any]], list[dict[str, Any]]]:
    where = {"scope.project_id": SOURCE.project_id, "scope.user_id": SOURCE.user_id}
    started = time.perf_counter()
    versions = [d async for d in db[MEMORIES].find(where, sort=[("memory_id", 1), ("version", 1)])]
    decisions = [d async for d in db[DECISIONS].find(where, sort=[("_id", 1)])]
    return time.perf_counter() - started, versions, decisions


async def as_lines(lines: list[str]) -> Any:
    for line in lines:
        yield line


async def run(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()[0]
    servers = start_servers(load_settings(), for_tests=True)
    try:
        settings = MongoSettings(uri=servers.mongodb_uri, database="bench-export")
        client = connect(settings)
        db = client["bench-export"]
        store = MemoryStore(db)
        await store.setup(probe=False)
        await seed(store, args.memories)
        register = ErasureRegister(db)
        exports: list[float] = []
        reads: list[float] = []
        imports: list[float] = []
        inserts: list[float] = []
        lines: list[str] = []
        size = versions = decisions = 0
        for r in range(args.rounds):
            took, lines, size = await timed_export(db)
            exports.append(took)
            took, got_versions, got_decisions = await raw_read(db)
            reads.append(took)
            versions, decisions = len(got_versions), len(got_decisions)
            target = MemoryScope(project_id="bench", user_id=f"copy-{r}")
            started = time.perf_counter()
            done = await import_lines(db, target, as_lines(lines), embedder=None, register=register)
            imports.append(time.perf_counter() - started)
            assert done.versions == versions
            fresh = client[f"bench-export-raw-{r}"]
            started = time.perf_counter()
            await fresh[MEMORIES].insert_many(got_versions, ordered=False)
            await fresh[DECISIONS].insert_many(got_decisions, ordered=False)
            inserts.append(time.perf_counter() - started)
            await client.drop_database(f"bench-export-raw-{r}")
        await client.drop_database("bench-export")
        await client.close()
        kind = servers.mongo_kind
    finally:
        servers.stop()
    me, mr = statistics.median(exports), statistics.median(reads)
    mi, mw = statistics.median(imports), statistics.median(inserts)

    def row(name: str, values: list[float]) -> str:
        med = statistics.median(values)
        return (
            f"| {name} | {med:.3f} s | {len(lines) / med:,.0f} lines/s | "
            f"{', '.join(f'{x:.3f}' for x in values)} |"
        )

    out = [
        "# Exporting and importing a user's memory — against raw cursor reads and inserts",
        "",
        f"Command: `.venv/bin/python -m bench.export --memories {args.memories} "
        f"--rounds {args.rounds}`",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).",
        f"MongoDB: {kind}.",
        "",
        f"A user with {args.memories} memories: {versions} versions and {decisions} "
        f"decision-log entries (64-d stand-in vectors); the export is {len(lines)} lines, "
        f"{size / 1e6:.2f} MB.",
        "",
        "| operation | median | throughput | all rounds (s) |",
        "|---|---|---|---|",
        row("`export_lines` (JSON lines, turn ids looked up per 200 versions)", exports),
        row("raw read of the same two cursors (no formatting)", reads),
        row("`import_lines` into a fresh user (parse, check, write hidden, commit)", imports),
        row("raw `insert_many` of the same decoded documents", inserts),
        "",
        f"Ratios: export / raw read **{me / mr:.1f}×**; import / raw insert **{mi / mw:.1f}×**. "
        "The export adds Extended-JSON encoding and the snapshot look-ups for turn ids; the "
        "import parses and validates every line (each version through the store's model), "
        "checks which memories and keys the target has, and moves everything in at the "
        "commit (one more update per document).",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    publish(asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
