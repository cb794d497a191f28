"""Replay without re-paying the LLM (issue 24; SPEC I6).

``python -m bench.replay`` publishes ``--snapshots`` snapshots (one session
each) to the snapshots topic of a local Kafka broker, with a local
MongoDB-compatible server, and runs ``mongomem replay extractor`` from offset 0
three times, each in a new consumer group, as a process:

1. **first pass** — nothing stored yet: one LLM call per snapshot and type;
2. **replay, nothing changed** — every answer is stored: no LLM call;
3. **replay with ``--re-extract``** — one LLM call per snapshot and type again.

The LLM is the rule-based stand-in (NOT a model) behind the local
OpenAI-compatible server with a fixed latency per call, and the server
counts every request it receives; embeddings are the hashing stand-in. Wall
time is the replay command's, start to exit: it includes the process start
and the command's own catch-up check (two lag polls 2 s apart), the same in
each pass.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.report import publish
from mongomem.adapters.kafka import ensure_topics, make_producer, pipeline_topics
from mongomem.codec import encode
from mongomem.testing import (
    STAND_IN_MODEL,
    ChatRequest,
    FakeOpenAIServer,
    Reply,
    Slow,
    StandInResponder,
    make_snapshot,
)
from mongomem.testing.harness import Pipeline, local_servers

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "replay.md"
TYPES = ("semantic", "episodic")


@dataclass(frozen=True)
class Pass:
    name: str
    wall_s: float
    requests: Counter[str]
    #: Prompt tokens of the pass's requests, as the endpoint counts them (its usage answers).
    prompt_tokens: int


#: Turns per snapshot of the workload (a user turn and the assistant's answer).
TURNS_PER_SNAPSHOT = 2


def endpoint_tokens(request: ChatRequest) -> int:
    """The prompt tokens the local server reports for ``request`` (its counting rule)."""
    return max(1, len(request.text().split()))


def replay(pipe: Pipeline, suffix: str, *extra: str) -> float:
    """Run ``mongomem replay extractor`` from offset 0 in a new group; its wall time."""
    command = [sys.executable, "-m", "mongomem.cli", "replay", "extractor"]
    command += [f"--group-suffix={suffix}", *extra]
    for memory_type in TYPES:
        command += ["--type", memory_type]
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=ROOT, env=pipe.env(), capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"replay failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


async def publish_snapshots(pipe: Pipeline, count: int) -> None:
    settings = pipe.settings
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, ["extractor.semantic"]))
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for n in range(count):
            snapshot = make_snapshot(
                [("user", f"My home airport is airport {n}."), ("assistant", "Noted.")],
                project_id="bench",
                user_id=f"u{n % 50}",
                session_id=f"s{n}",
            )
            await producer.send(
                settings.kafka.topic("snapshots"),
                encode(snapshot),
                key=snapshot.session.kafka_key(),
            )
        await producer.flush()
    finally:
        await producer.stop()


def run(args: argparse.Namespace) -> str:
    stand_in = StandInResponder()

    def slow_stand_in(request: ChatRequest) -> Reply:
        return Slow(args.llm_latency, stand_in(request))

    root = Path(tempfile.mkdtemp(prefix="mongomem-bench-replay-"))
    passes: list[Pass] = []
    with (
        local_servers(root) as (kafka, mongo),
        FakeOpenAIServer(slow_stand_in, model=STAND_IN_MODEL) as llm,
    ):
        pipe = Pipeline(root=root, kafka=kafka, mongo=mongo, llm=llm, prefix="bench", database="b")
        asyncio.run(publish_snapshots(pipe, args.snapshots))
        for name, suffix, extra in (
            ("first pass", "-first", ()),
            ("replay, nothing changed", "-again", ()),
            ("replay --re-extract", "-forced", ("--re-extract",)),
        ):
            before = len(llm.chat_requests)
            wall = replay(pipe, suffix, *extra)
            received = llm.chat_requests[before:]
            asked = Counter(r.schema_name or "?" for r in received)
            passes.append(Pass(name, wall, asked, sum(map(endpoint_tokens, received))))
    return report(args, passes)


def report(args: argparse.Namespace, passes: list[Pass]) -> str:
    first = passes[0]
    expected = args.snapshots * len(TYPES)
    lines = [
        "# Benchmark: replay without re-paying the LLM (issue 24, SPEC I6)",
        "",
        "Command (from the repository root):",
        "",
        f"    .venv/bin/python -m bench.replay --snapshots {args.snapshots} "
        f"--llm-latency {args.llm_latency}",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python "
        f"{platform.python_version()}, on a machine shared with other work (wall times are "
        "indicative; the request counts are exact). LLM: the rule-based stand-in (NOT a "
        f"model) behind the local OpenAI-compatible server, {args.llm_latency:g} s per call, "
        "counting every request it receives. Embeddings: the hashing stand-in (NOT a model). "
        f"{args.snapshots} snapshots (one session each), types {', '.join(TYPES)}: "
        f"{expected} (snapshot, type) pairs. Each pass is `mongomem replay extractor` from "
        "offset 0 in a new consumer group, as a process; its wall time includes the process "
        "start and the command's catch-up check (two lag polls 2 s apart).",
        "",
        "| pass | LLM requests received | per snapshot and type | LLM calls per turn | "
        "prompt tokens per turn | wall time | vs first pass |",
        "|---|---|---|---|---|---|---|",
    ]
    turns = args.snapshots * TURNS_PER_SNAPSHOT
    for p in passes:
        total = sum(p.requests.values())
        lines.append(
            f"| {p.name} | {total} | {total / expected:.2f} | {total / turns:.2f} | "
            f"{p.prompt_tokens / turns:.1f} | {p.wall_s:.1f} s | "
            f"{p.wall_s / first.wall_s:.2f}× |"
        )
    again, forced = passes[1], passes[2]
    lines += [
        "",
        f"Goals: a replay with nothing changed makes 0 LLM calls — "
        f"{sum(again.requests.values())}, "
        f"{'met' if sum(again.requests.values()) == 0 else 'NOT met'}; `--re-extract` makes one "
        f"call per snapshot and type — {sum(forced.requests.values())} of {expected}, "
        f"{'met' if sum(forced.requests.values()) == expected else 'NOT met'}.",
        "",
        f"Before issue 24 every replay paid what the first pass (and `--re-extract`) pays: "
        f"{sum(first.requests.values()) / turns:.2f} LLM calls and "
        f"{first.prompt_tokens / turns:.1f} prompt tokens per turn on this workload "
        f"({turns} turns); now a replay with nothing changed pays "
        f"{sum(again.requests.values()) / turns:.2f} and {again.prompt_tokens / turns:.1f}. "
        "Prompt tokens are counted by the endpoint's own rule (words of the messages, what "
        "its usage answers report).",
        "",
        "Requests per schema: "
        + "; ".join(f"{p.name}: {dict(sorted(p.requests.items()))}" for p in passes),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshots", type=int, default=240)
    parser.add_argument("--llm-latency", type=float, default=0.1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    publish(run(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
