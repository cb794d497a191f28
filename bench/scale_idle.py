"""The idle-CPU phase of :mod:`bench.scale` alone, on an empty store (a few minutes).

``python -m bench.scale_idle`` starts the same servers and stages as
``bench.scale`` (a local Kafka broker, mongo-java-server in memory; watcher,
windowing, a semantic extractor and the reconciler as processes, the product's
timers), runs a few end-to-end sessions so every stage has worked once, waits
until every consumer group caught up, and then measures, over ``--idle-s``
seconds with nothing written, the cores each process used (from ``/proc``),
and within each process the threads that used them (by thread name: a JVM's
``G1 …``, ``C2 CompilerThre…``, ``kafka-…`` threads; a stage's ``python``
event loop and its helpers). The servers alone (no stage running) are measured
first, as a side row. It writes ``bench/results/scale_idle.md``.

The goal (issue 28): with the pipeline idle, the servers and stages use < 5% of
a core in total, measured over 60 s. The full ``bench.scale`` measures the same
on an empty and on a seeded store; this is the loop to iterate on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.report import publish
from bench.scale import (
    PROJECT,
    caught_up,
    e2e,
    process_groups,
    server_pids,
    stand_in_pipeline,
)
from bench.threads import thread_ticks
from mongomem.sdk import AsyncMemory

RESULTS = Path(__file__).resolve().parent / "results" / "scale_idle.md"
#: The goal's bound, and the margin this benchmark holds itself to (noise on a shared
#: machine moves a run by a point or more).
GOAL = 0.05
MARGIN = 0.035
#: Threads below this share of a core are summed into one "other threads" line.
THREAD_FLOOR = 0.0005


@dataclass
class Usage:
    """Cores one process group used over the measurement, in all and by thread name."""

    cores: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)


async def idle_by_thread(groups: dict[str, list[int]], seconds: float) -> dict[str, Usage]:
    """Cores per group and per thread name over ``seconds`` (1.0 = one core busy). A
    thread that ended meanwhile is not counted (an idle process starts none)."""
    hz = os.sysconf("SC_CLK_TCK")
    before = {name: thread_ticks(pids) for name, pids in groups.items()}
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after = {name: thread_ticks(pids) for name, pids in groups.items()}
    elapsed = time.monotonic() - started
    out: dict[str, Usage] = {}
    for name in groups:
        usage = Usage()
        for key, (thread, ticks) in after[name].items():
            used = (ticks - before[name].get(key, (thread, 0))[1]) / hz / elapsed
            usage.threads[thread] = usage.threads.get(thread, 0.0) + used
            usage.cores += used
        out[name] = usage
    return out


# ------------------------------------------------------------------ the run


@dataclass
class IdleRun:
    servers_alone: dict[str, Usage]
    pipeline: dict[str, Usage]
    elapsed_s: float


async def run(args: argparse.Namespace) -> IdleRun:
    started = time.monotonic()
    with stand_in_pipeline("idle", args.llm_latency) as pipe:
        kafka, mongo = pipe.kafka, pipe.mongo
        alone = await idle_by_thread(server_pids(kafka, mongo), args.servers_idle_s)
        pipe.start_all()
        try:
            memory = AsyncMemory(project_id=PROJECT, settings=pipe.settings)
            try:
                await e2e(memory, "warm", args.warm)  # every stage has worked once
            finally:
                await memory.close()
            await caught_up(pipe, args)
            await asyncio.sleep(args.settle_s)
            used = await idle_by_thread(process_groups(pipe, kafka, mongo), args.idle_s)
        finally:
            pipe.stop_all()
    return IdleRun(alone, used, time.monotonic() - started)


def report(args: argparse.Namespace, result: IdleRun) -> str:
    command = (
        f"python -m bench.scale_idle --idle-s {args.idle_s:g} "
        f"--servers-idle-s {args.servers_idle_s:g} --warm {args.warm} --settle-s {args.settle_s:g}"
    )
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    total = sum(u.cores for u in result.pipeline.values())

    def pct(x: float) -> str:
        return f"{x * 100:.2f}%"

    rows = [f"| {name} | {pct(u.cores)} |" for name, u in result.pipeline.items()]
    rows.append(f"| **total** | **{pct(total)}** |")
    rows += [
        f"| servers alone (no stage running): {name} | {pct(u.cores)} |"
        for name, u in result.servers_alone.items()
    ]
    threads = []
    for name, u in result.pipeline.items():
        ranked = sorted(u.threads.items(), key=lambda tc: -tc[1])
        big = [(t, c) for t, c in ranked if c >= THREAD_FLOOR]
        rest = u.cores - sum(c for _, c in big)
        cells = ", ".join(f"`{t}` {pct(c)}" for t, c in big) or "—"
        if rest > 0.00005:
            cells += f"; other threads {pct(rest)}"
        threads.append(f"| {name} | {cells} |")
    verdict = "met" if total < GOAL else "NOT met"
    margin = "within" if total <= MARGIN else "outside"
    return f"""# Benchmark: idle CPU of the pipeline (issue 28), empty store

Command (from the repository root): `{command}`

Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python
{platform.python_version()}, **2 CPUs shared with other engineers' work** (load
average at the end: {load}); the run took {result.elapsed_s:.0f} s. The servers and
stages of `bench.scale` (a local Kafka broker; mongo-java-server in memory; watcher,
windowing, a semantic extractor, reconciler as processes, the product's timers), after
{args.warm} end-to-end sessions and every consumer group caught up; nothing written
while measured. From `/proc/<pid>/task/*/stat` (utime + stime), 100% = one core busy.

**Total {pct(total)} of a core over {args.idle_s:g} s: the goal (< 5%) {verdict}, {margin}
this benchmark's margin ({MARGIN * 100:g}%).**

## Per process

| process | cores |
|---|---|
{chr(10).join(rows)}

## Per thread (by name; pools summed; threads under {pct(THREAD_FLOOR)} as "other")

| process | threads |
|---|---|
{chr(10).join(threads)}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--servers-idle-s", type=float, default=20.0)
    parser.add_argument("--warm", type=int, default=2, help="end-to-end sessions before")
    parser.add_argument(
        "--settle-s", type=float, default=3.0, help="wait after catching up, before measuring"
    )
    parser.add_argument("--llm-latency", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    publish(report(args, asyncio.run(run(args))), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
