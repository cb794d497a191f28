"""What a leaner windowing stage could save: its own work per turn against a bare Python floor.

``python -m bench.windowing_floor`` needs no server and writes
``bench/results/windowing_floor.md``.

P3 (:mod:`bench.windowing`) finds the stage bound by its own CPU time per
turn. This benchmark says how much of the stage's *own* part of that time
(no server, no client library) is the work any Python stage must do, and how
much is the stage's structure: pydantic models per turn, the window logic's
bookkeeping, batch planning, the changelog table and the event loop.

* **The stage's own work**: :func:`bench.windowing.own_work`, the stage's
  windower, batch pipelines, changelog table and ``consume()`` loop over the
  records in the runtime's in-memory broker, as P3's row of that name.
* **The floor**: one plain loop over the same records doing only what a
  snapshot needs — each record parsed with orjson and checked (kind, version,
  fields, types, role, an aware ``created_at``, the session's identifiers
  once per session, the turn id's hash), its turn kept in a list per session,
  and every ``max_messages`` turns a snapshot closed: its id hashed, its Kafka
  value and its MongoDB document (as BSON) written. Left out: the changelog's
  window states, the time rules (idle, gaps, late and duplicate turns),
  redelivery stamps, erasure checks, dead letters, stats and the event loop.

The floor's output is checked before it is timed: every snapshot's bytes and
BSON document equal those the stage's own code gives for the same records
(:class:`~mongomem.stages.windowing.reader.TurnReader`, the window logic and
:func:`~mongomem.stages.windowing.snapshot_encode.snapshot_encoded`), so it
does not win by doing less of that work. The two runs alternate, five of
each; the medians are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import orjson

from bench.report import publish
from bench.windowing import backlog_turns, own_work, scoped
from mongomem.codec import SCHEMA_VERSION, encode, kind_of
from mongomem.models import Role, SessionKey, Snapshot, Turn, stable_id
from mongomem.settings import Settings, load_settings
from mongomem.stages.windowing import Policies
from mongomem.stages.windowing.logic import Window
from mongomem.stages.windowing.reader import TurnReader, TurnRecord
from mongomem.stages.windowing.snapshot_encode import snapshot_encoded

RESULTS = Path(__file__).resolve().parent / "results" / "windowing_floor.md"
RUNS = 5
OWN_ROW = (
    "the stage's own work (`own_work`: windower, batch pipelines, changelog table, "
    "`consume()`, in-memory broker)"
)
FLOOR_ROW = "the floor: parse, check, keep, close, encode (one plain loop)"

#: One record of the turns topic: ``(key, value)``.
Pair = tuple[bytes, bytes]
#: A closed snapshot as sent: ``(Kafka value, BSON document)``.
Sent = tuple[bytes, bytes]

_TURN, _SNAPSHOT = kind_of(Turn), kind_of(Snapshot)
_FIELDS = frozenset(Turn.model_fields) - {"recorded_at", "speaker"}
_ROLES = frozenset(r.value for r in Role)


def records(sessions: int, per_session: int) -> list[Pair]:
    """P3's backlog (:func:`~bench.windowing.backlog_turns`) as the records it sends, built
    in memory."""
    return [
        (t.session.kafka_key(), encode(t))
        for turns in backlog_turns(sessions, per_session)
        for t in turns
    ]


def floor(pairs: list[Pair], max_messages: int) -> list[Sent]:
    """The bare loop (see the module docstring); raises ``ValueError`` on what it does not
    expect (the benchmark's records are all well-formed turns)."""
    sessions: dict[tuple[str, str, str], bytes] = {}
    windows: dict[bytes, list[tuple[str, int, str, str, datetime]]] = {}
    sent: list[Sent] = []
    for key, raw in pairs:
        envelope = orjson.loads(raw)
        data = envelope["data"]
        if envelope["kind"] != _TURN or envelope["v"] != SCHEMA_VERSION or data.keys() != _FIELDS:
            raise ValueError("not a plain turn")
        seq, role, content = data["seq"], data["role"], data["content"]
        if type(seq) is not int or seq < 1 or role not in _ROLES or type(content) is not str:
            raise ValueError("a field of the wrong type")
        names = (data["project_id"], data["user_id"], data["session_id"])
        prefix = sessions.get(names)
        if prefix is None:
            SessionKey(project_id=names[0], user_id=names[1], session_id=names[2])
            prefix = sessions[names] = "\x00".join(names).encode() + b"\x00"
        turn_id = "turn_" + hashlib.sha256(prefix + b"%d" % seq).hexdigest()[:24]
        at = datetime.fromisoformat(data["created_at"])
        if data["turn_id"] != turn_id or at.tzinfo is None:
            raise ValueError("a turn id or time that does not check")
        window = windows.setdefault(key, [])
        window.append((turn_id, seq, role, content, at))
        if len(window) == max_messages:
            sent.append(_close(names, window))
            windows[key] = []
    return sent


def _close(names: tuple[str, str, str], window: list[tuple[str, int, str, str, datetime]]) -> Sent:
    first, last = window[0][1], window[-1][1]
    snapshot_id = stable_id("snap", *names, first, last)
    turns = [
        {"turn_id": t, "seq": s, "role": r, "content": c, "created_at": a}
        for t, s, r, c, a in window
    ]
    fields = {
        "project_id": names[0],
        "user_id": names[1],
        "session_id": names[2],
        "first_seq": first,
        "last_seq": last,
        "turns": turns,
        "reason": "count",
        "closed_at": window[-1][4],
    }
    value = orjson.dumps(
        {"kind": _SNAPSHOT, "v": SCHEMA_VERSION, "data": {"snapshot_id": snapshot_id, **fields}},
        option=orjson.OPT_UTC_Z,
    )
    document = {"_id": snapshot_id, **fields, "turn_ids": [t[0] for t in window]}
    return value, bson.encode(document)


def stage_output(pairs: list[Pair], settings: Settings) -> list[Sent]:
    """What the stage's own code sends for ``pairs``: its reader, window logic and encoding."""
    reader = TurnReader()
    windows: dict[bytes, Window] = {}
    sent: list[Sent] = []
    policy = Policies(settings.windowing).for_project("bench")
    for _, raw in pairs:
        record = reader.read(raw)
        assert isinstance(record, TurnRecord)
        window = windows.setdefault(record.key, Window(record.session))
        window.on_turn(record.turn, policy)
        for snapshot in window.snapshots:
            value, document = snapshot_encoded(snapshot)
            sent.append((value, bson.encode(document)))
        window.snapshots.clear()
    return sent


def _timed(run: Callable[[], Any], turns: int) -> tuple[float, float]:
    """(wall µs, CPU µs) a turn of one call of ``run``."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return (time.perf_counter() - wall) / turns * 1e6, (time.process_time() - cpu) / turns * 1e6


def measure(sessions: int, per_session: int) -> dict[str, Any]:
    settings = scoped(load_settings(), "floor", max_messages=20, idle_timeout_s=3600)
    max_messages = settings.windowing.max_messages
    pairs = records(sessions, per_session)
    expected = stage_output(pairs, settings)
    got = floor(pairs, max_messages)
    if not got or got != expected:
        raise AssertionError("the floor's snapshots differ from the stage's: it is not a floor")
    runs: dict[str, list[tuple[float, float]]] = {"floor": [], "own": []}
    for _ in range(RUNS):
        runs["floor"].append(_timed(lambda: floor(pairs, max_messages), len(pairs)))
        runs["own"].append(_timed(lambda: asyncio.run(own_work(settings, pairs)), len(pairs)))
    return {"turns": len(pairs), "snapshots": len(got), "runs": runs}


def report(command: str, r: dict[str, Any]) -> str:
    med = {
        name: [statistics.median(run[i] for run in runs) for i in (0, 1)]
        for name, runs in r["runs"].items()
    }
    (own_wall, own_cpu), (floor_wall, floor_cpu) = med["own"], med["floor"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())

    def runs(name: str) -> str:
        return ", ".join(f"{cpu:.1f}" for _, cpu in sorted(r["runs"][name], key=lambda x: x[1]))

    return f"""# Benchmark: the windowing stage's own work against a bare Python floor

Command (from the repository root):

    {command}

Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python
{platform.python_version()}, {os.cpu_count()} CPUs shared with other work (load average at the
end: {load}). No server: both rows run in this process, alternating, {RUNS} runs each.

Records: {r["turns"]:,} turns (P3's backlog shape, built in memory), `max_messages` = 20:
{r["snapshots"]:,} snapshots. The floor's snapshot bytes and BSON documents were checked equal
to the stage's own encoding of the same records before timing.

| row | µs a turn, CPU (median) | µs a turn, wall (median) | CPU µs a turn, each run |
|---|---|---|---|
| {OWN_ROW} | {own_cpu:.1f} | {own_wall:.1f} | {runs("own")} |
| {FLOOR_ROW} | {floor_cpu:.1f} | {floor_wall:.1f} | {runs("floor")} |

**The stage's own work is {own_cpu / floor_cpu:.1f}× the floor: {own_cpu - floor_cpu:.1f} µs a
turn of its own CPU** is structure (and the in-memory broker that stands in for Kafka there)
— pydantic models per turn (`SnapshotTurn`, `Snapshot`,
the changelog's `WindowState`), the window logic's bookkeeping (signatures, stamps, time rules),
batch planning and delivery, the changelog table and the event loop — not the parsing,
checking, hashing and encoding every stage must do. P3 (`bench/results/windowing_p3.md`) gives
the stage's whole CPU per turn in a drain (its own work plus the Kafka and MongoDB clients) and
what its goal leaves it; this difference is the most a leaner per-turn path inside the stage
could take off that. The floor leaves the changelog states and every rule but the count close
out, so a real stage stays above it.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--per-session", type=int, default=40)
    args = parser.parse_args(argv)
    command = (
        f".venv/bin/python -m bench.windowing_floor --sessions {args.sessions} "
        f"--per-session {args.per_session}"
    )
    publish(report(command, measure(args.sessions, args.per_session)), RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
