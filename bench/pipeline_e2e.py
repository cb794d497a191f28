"""End-to-end benchmark: turns through every stage, as processes (issue 7; P4, P5).

The stages run as separate processes (watcher, windowing, extractor for all
four types, reconciler) against a local Kafka broker and MongoDB-compatible
server. The LLM is the rule-based stand-in (NOT a model) behind the local
OpenAI-compatible server, with a fixed latency per call; embeddings are the
hashing stand-in. Measured in the same run:

* the raw baseline: how fast the same turns are written (``record_turn``);
* pipeline throughput: turns from the first write until every session's fact
  is readable and every consumer group has caught up;
* per session: last turn written → its fact readable (p50/p99);
* P5: LLM calls per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.report import publish
from mongomem.adapters.kafka import CANDIDATES
from mongomem.adapters.mongo import DECISIONS, MEMORIES
from mongomem.codec import decode
from mongomem.ltm.judge import SYSTEM_PROMPT
from mongomem.models import MemoryCandidate, utcnow
from mongomem.operations.usage import LLM_USAGE
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.testing import (
    STAND_IN_MODEL,
    ChatRequest,
    FakeOpenAIServer,
    Reply,
    Slow,
    StandInResponder,
)
from mongomem.testing.harness import Pipeline, client, local_servers, wait_until

PY = platform.python_version()
RESULTS = Path(__file__).resolve().parent / "results" / "pipeline_e2e.md"
ATTRIBUTES = ("home airport", "seat preference", "favorite city", "meal preference")


def session_turns(user: int, attr: str) -> list[tuple[str, str]]:
    value = f"value {user} of {attr}"
    return [
        ("user", f"My {attr} is {value}."),
        ("assistant", "Noted."),
        ("user", "Thanks for remembering."),
        ("assistant", "Any time."),
        ("user", "Bye for now."),
    ]  # five turns: the window closes on count (MONGOMEM_WINDOW_MAX_MESSAGES=5)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(args: argparse.Namespace) -> str:
    stand_in = StandInResponder()

    def slow_stand_in(request: ChatRequest) -> Reply:
        return Slow(args.llm_latency, stand_in(request))

    root = Path(tempfile.mkdtemp(prefix="mongomem-bench-e2e-"))
    with (
        local_servers(root) as (kafka, mongo),
        FakeOpenAIServer(slow_stand_in, model=STAND_IN_MODEL) as llm,
    ):
        pipe = Pipeline(root=root, kafka=kafka, mongo=mongo, llm=llm, prefix="bench", database="b")
        pipe.start_all()
        try:
            return await measure(pipe, llm, args)
        finally:
            pipe.stop_all()


async def measure(pipe: Pipeline, llm: FakeOpenAIServer, args: argparse.Namespace) -> str:
    memory = AsyncMemory(project_id="bench", settings=pipe.settings)
    sessions = [(u, a) for u in range(args.users) for a in ATTRIBUTES]
    last_turn_at: dict[tuple[int, str], datetime] = {}
    readable_at: dict[tuple[int, str], datetime] = {}

    async def write(user: int, attr: str) -> None:
        chat = memory.bind(
            MemoryRequestContext(user_id=f"u{user}", session_id=attr.replace(" ", "-"))
        )
        for role, content in session_turns(user, attr):
            turn = await chat.record_turn(role, content)
        last_turn_at[(user, attr)] = turn.created_at

    # Warm up: one session through every stage, so process start-up is not measured.
    await memory.bind(MemoryRequestContext(user_id="warm", session_id="w")).record_turn(
        "user", "My warm up is done."
    )
    async with client(pipe) as mongo:
        db = mongo[pipe.database]

        async def warmed_up() -> bool:
            return await db[MEMORIES].count_documents({"scope.user_id": "warm"}) > 0

        await wait_until(warmed_up, args.timeout, "the warm-up memory")
        calls_before = len(llm.chat_requests)

        started = time.monotonic()
        await asyncio.gather(*(write(u, a) for u, a in sessions))
        written = time.monotonic()
        labels = {(u, a): (f"u{u}", a.replace(" ", "-")) for u, a in sessions}
        while len(readable_at) < len(sessions):
            found = db[MEMORIES].find(
                {"memory_type": "semantic", "status": "current", "scope.project_id": "bench"},
                {"scope.user_id": 1, "key": 1},
            )
            seen = {(d["scope"]["user_id"], d["key"]) async for d in found}
            now = utcnow()
            for session, label in labels.items():
                if session not in readable_at and label in seen:
                    readable_at[session] = now
            if time.monotonic() - started > args.timeout:
                raise SystemExit(f"only {len(readable_at)}/{len(sessions)} sessions in time")
            await asyncio.sleep(0.2)

        async def caught_up() -> bool:
            return await pipe.lag() == 0

        await wait_until(caught_up, args.timeout, "every consumer group to catch up", every=0.2)
        done = time.monotonic()
        first_wave_calls = len(llm.chat_requests) - calls_before
        first_wave = Counter(r.schema_name for r in llm.chat_requests[calls_before:])
        first_shapes = judge_shapes(llm.chat_requests[calls_before:])
        changes = await second_wave(pipe, memory, db, args)
        prompt_tokens = await prompt_tokens_per_snapshot(db)
    await memory.close()

    turns = len(sessions) * 5
    calls = first_wave_calls
    latencies = [(readable_at[s] - last_turn_at[s]).total_seconds() for s in sessions]
    write_rate = turns / (written - started)
    pipe_rate = turns / (done - started)
    load = " ".join(f"{x:.1f}" for x in _loadavg())
    command = f"python -m bench.pipeline_e2e --users {args.users} --llm-latency {args.llm_latency}"
    if args.judge_linger is not None:
        command += f" --judge-linger {args.judge_linger:g} --out {args.out.name}"
    linger = os.environ.get("MONGOMEM_RECONCILE_JUDGE_LINGER_S", "1.0 (the default)")
    judged_100 = changes.per_100(changes.judged)
    judge_100 = f"{changes.per_100(changes.judge_calls)} ({changes.judge_calls} requests)"
    wave_calls = (
        f"{changes.calls / changes.turns:.2f} ({changes.calls} calls for {changes.turns} turns)"
    )
    by_schema = ", ".join(f"{name} {n}" for name, n in sorted(first_wave.items(), key=str))
    first_judged = ", ".join(f"{s} {n}" for s, n in first_shapes.items()) or "none"
    t = changes.turns
    before_row = f"{changes.alone_calls / t:.2f} | {changes.alone_tokens / t:,.0f}"
    after_row = f"{changes.calls / t:.2f} | {changes.tokens / t:,.0f}"
    shape_lines = "\n".join(f"- {shape}: {n}" for shape, n in changes.shapes.items())
    spread = changes.spread or [0.0]
    spread_p50, spread_max = statistics.median(spread), max(spread)
    return f"""# Benchmark: the whole pipeline as processes (P4, P5)

Command (from the repository root): `{command}`

Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python {PY},
2 CPUs shared by the servers, the four stage processes and this script (load average at
the end: {load}). LLM: the rule-based stand-in (NOT a model) over HTTP with a fixed
{args.llm_latency * 1000:.0f} ms per call; embeddings: the hashing stand-in. Windows close
on count (5 turns). {len(sessions)} sessions of 5 turns ({args.users} users × 4), one fact each.

| measure | value |
|---|---|
| raw baseline: `record_turn` of the same turns (concurrent) | {write_rate:,.0f} turns/s |
| pipeline: first write → every fact readable and every group caught up | {pipe_rate:,.0f} turns/s |
| ratio pipeline / raw writes | {pipe_rate / write_rate:.2f}× |
| last turn of a session → its fact readable, p50 | {statistics.median(latencies):.2f} s |
| same, p99 | {percentile(latencies, 0.99):.2f} s |
| same, max | {max(latencies):.2f} s |
| P5: LLM calls per turn | {calls / turns:.2f} ({calls} calls for {turns} turns) |

P5 is four calls per snapshot (one per memory type) divided by the snapshot's
turns: the window size sets it (a session whose turns come slower than the idle
timeout makes two snapshots); judge calls come on top. First wave's requests by
schema: {by_schema}; its judge requests: {first_judged}.
The latency includes one LLM call ({args.llm_latency:.1f} s), the embedding, and a hop
through each of the three Kafka topics.

## Judge calls and prompt size (issue 24)

Then a second wave: each user's one new session of 5 turns changes all four facts at
once, so its snapshot carries four semantic candidates whose keys already exist (each
needs the judge). The reconciler asks the judge once per snapshot (its types together);
"judged decisions" is what a judge asked per candidate would have cost.

| measure | value |
|---|---|
| second wave: candidates reconciled (all types) | {changes.candidates} |
| judged decisions (= calls of a per-candidate judge) per 100 candidates | {judged_100} |
| judge requests the endpoint received per 100 candidates | {judge_100} |
| second wave: LLM calls per turn (extraction + judge) | {wave_calls} |
| extraction prompt tokens per snapshot and type, p50 | {prompt_tokens[0]:,.0f} |
| same, p95 | {prompt_tokens[1]:,.0f} |
| extraction prompt tokens per snapshot (its four types), p50 | {prompt_tokens[2]:,.0f} |
| same, p95 | {prompt_tokens[3]:,.0f} |

Prompt tokens are as the local server counts them (from `llm_usage`, every extraction
request of both waves).

The second wave, before and after (the endpoint counts requests and prompt tokens;
"before" asks the judge one question per request, as before issue 24: each batched
question as the request `LLMJudge.judge` would have sent, counted by the same rule):

| second wave | LLM calls per turn | prompt tokens per turn |
|---|---|---|
| before: per-candidate judge | {before_row} |
| after: one judge call per snapshot | {after_row} |

Where the second wave's judge requests went (what each asked, as the endpoint saw it):

{shape_lines}

Seconds between a second-wave snapshot's first and last candidate on the candidates
topic (its types come from separate consumers): p50 {spread_p50:.2f} s, max {spread_max:.2f} s.
The reconciler waits for candidates while they keep coming (`MONGOMEM_RECONCILE_JUDGE_LINGER_S`,
here {linger} s), so a snapshot's types usually share one judge call; with `--judge-linger 0`
(`pipeline_e2e_linger0.md`) a snapshot often pays one call per type, when each type's candidates
come in a batch of their own. Judge requests asked alone for a snapshot and type that
also had a batched request (a missing verdict, or a question an earlier candidate of the
batch changed): {changes.fallbacks}.
"""


@dataclass(frozen=True)
class Changes:
    candidates: int
    judged: int
    judge_calls: int
    calls: int
    turns: int
    shapes: dict[str, int]
    spread: list[float]
    #: Prompt tokens of the wave's requests, as the endpoint counts them.
    tokens: int
    #: The same wave with a judge asked one question per call (before issue 24): its
    #: requests and prompt tokens (each batched question as the request it would have been).
    alone_calls: int
    alone_tokens: int
    #: Judge requests asked alone for a snapshot that also had a batched request.
    fallbacks: int

    def per_100(self, count: int) -> str:
        return "—" if not self.candidates else f"{100.0 * count / self.candidates:.1f}"


async def second_wave(
    pipe: Pipeline, memory: AsyncMemory, db: Any, args: argparse.Namespace
) -> Changes:
    """Each user changes all four facts in one session; wait until every change is current."""
    llm = pipe.llm
    before = len(llm.chat_requests)
    logged_before = await db[DECISIONS].count_documents({})
    judged_before = await db[DECISIONS].count_documents({"judged": True})

    async def change(user: int) -> None:
        chat = memory.bind(MemoryRequestContext(user_id=f"u{user}", session_id="changes"))
        for attr in ATTRIBUTES:
            await chat.record_turn("user", f"My {attr} is changed {user} of {attr}.")
        await chat.record_turn("assistant", "Noted, all four.")

    await asyncio.gather(*(change(u) for u in range(args.users)))
    wanted = args.users * len(ATTRIBUTES)

    async def all_changed() -> bool:
        query = {"memory_type": "semantic", "status": "current", "text": {"$regex": "changed"}}
        return await db[MEMORIES].count_documents(query) >= wanted and await pipe.lag() == 0

    await wait_until(all_changed, args.timeout, "every change to be current", every=0.5)
    requests = llm.chat_requests[before:]
    judge_calls = sum(
        r.schema_name in ("reconcile_verdict", "reconcile_verdicts") for r in requests
    )
    shapes = judge_shapes(requests)
    spread = await arrival_spread(pipe, db)
    alone_calls, alone_tokens = asked_alone(requests)
    fallbacks = await judge_fallbacks(db, requests)
    return Changes(
        candidates=await db[DECISIONS].count_documents({}) - logged_before,
        judged=await db[DECISIONS].count_documents({"judged": True}) - judged_before,
        judge_calls=judge_calls,
        calls=len(requests),
        turns=args.users * (len(ATTRIBUTES) + 1),
        shapes=shapes,
        spread=spread,
        tokens=sum(map(endpoint_tokens, requests)),
        alone_calls=alone_calls,
        alone_tokens=alone_tokens,
        fallbacks=fallbacks,
    )


async def judge_fallbacks(db: Any, requests: list[ChatRequest]) -> int:
    """Judge requests asked alone for a snapshot and type that also had a batched request
    (each request's snapshot is its ``llm_usage`` record's, tied by the call id it carried;
    its types are those of its questions)."""
    by_id = {r.call_id: r for r in requests if r.call_id}
    batched: set[tuple[str, str]] = set()
    alone: list[tuple[str, str]] = []
    async for doc in db[LLM_USAGE].find({"kind": "call", "purpose": "judge"}):
        request = by_id.get(doc["_id"])
        if request is None:
            continue
        snapshot = str(doc.get("snapshot_id"))
        body = json.loads(request.text("user"))
        if request.schema_name == "reconcile_verdicts":
            batched |= {(snapshot, q["memory_type"]) for q in body["questions"]}
        elif request.schema_name == "reconcile_verdict":
            alone.append((snapshot, body["memory_type"]))
    return sum(pair in batched for pair in alone)


def endpoint_tokens(request: ChatRequest) -> int:
    """The prompt tokens the local server reports for ``request`` (its counting rule)."""
    return max(1, len(request.text().split()))


def asked_alone(requests: list[ChatRequest]) -> tuple[int, int]:
    """Requests and prompt tokens of ``requests`` had every batched judge question been a
    request of its own (the per-candidate judge): the prompt ``LLMJudge.judge`` sends for it,
    counted by the endpoint's rule."""
    calls = tokens = 0
    for r in requests:
        if r.schema_name != "reconcile_verdicts":
            calls, tokens = calls + 1, tokens + endpoint_tokens(r)
            continue
        for question in json.loads(r.text("user"))["questions"]:
            body = {k: v for k, v in question.items() if k != "id"}
            user = json.dumps(body, ensure_ascii=False, indent=1)
            calls += 1
            tokens += max(1, len(f"{SYSTEM_PROMPT}\n{user}".split()))
    return calls, tokens


async def arrival_spread(pipe: Pipeline, db: Any) -> list[float]:
    """Per second-wave snapshot, seconds between its first and last candidate on the
    candidates topic (Kafka's record timestamps): the types of one snapshot are extracted by
    separate consumers, so they reach the reconciler apart."""
    refs = set(await db[DECISIONS].distinct("evidence.ref", {"evidence.session_id": "changes"}))
    consumer = AIOKafkaConsumer(
        pipe.settings.kafka.topic(CANDIDATES),
        bootstrap_servers=pipe.settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    times: dict[str, list[int]] = {}
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                break
            for records in batch.values():
                for record in records:
                    candidate = decode(record.value, MemoryCandidate)
                    if candidate.evidence.ref in refs:
                        times.setdefault(candidate.evidence.ref, []).append(record.timestamp)
    finally:
        await consumer.stop()
    return sorted((max(t) - min(t)) / 1000.0 for t in times.values())


def judge_shapes(requests: list[ChatRequest]) -> dict[str, int]:
    """Judge requests by what they asked: ``1 × semantic``, ``4 × semantic + 1 × episodic`` …"""
    shapes: dict[str, int] = {}
    for r in requests:
        if r.schema_name == "reconcile_verdict":
            types = [json.loads(r.text("user"))["memory_type"]]
        elif r.schema_name == "reconcile_verdicts":
            types = [q["memory_type"] for q in json.loads(r.text("user"))["questions"]]
        else:
            continue
        counted = Counter(types)
        shape = " + ".join(f"{n} × {t}" for t, n in sorted(counted.items()))
        shape += " (batch)" if r.schema_name == "reconcile_verdicts" else " (alone)"
        shapes[shape] = shapes.get(shape, 0) + 1
    return dict(sorted(shapes.items(), key=lambda kv: -kv[1]))


async def prompt_tokens_per_snapshot(db: Any) -> tuple[float, float, float, float]:
    """p50 and p95 of the prompt tokens of one snapshot's extraction for one type, then of
    one snapshot's extraction for all its types."""
    tokens: dict[tuple[str, str], int] = {}
    async for doc in db[LLM_USAGE].find({"kind": "call", "purpose": "extract"}):
        key = (str(doc.get("snapshot_id")), str(doc.get("memory_type")))
        tokens[key] = tokens.get(key, 0) + int(doc.get("prompt_tokens", 0))
    per_snapshot: dict[str, int] = {}
    for (snapshot, _), n in tokens.items():
        per_snapshot[snapshot] = per_snapshot.get(snapshot, 0) + n
    values = [float(v) for v in tokens.values()] or [0.0]
    totals = [float(v) for v in per_snapshot.values()] or [0.0]
    return (
        percentile(values, 0.5),
        percentile(values, 0.95),
        percentile(totals, 0.5),
        percentile(totals, 0.95),
    )


def _loadavg() -> tuple[float, float, float]:
    try:
        import os

        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--llm-latency", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--judge-linger",
        type=float,
        default=None,
        help="MONGOMEM_RECONCILE_JUDGE_LINGER_S for the reconciler (default: the setting's)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.judge_linger is not None:  # the stage processes inherit this environment
        os.environ["MONGOMEM_RECONCILE_JUDGE_LINGER_S"] = str(args.judge_linger)
    publish(asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
