"""The windowing stage: turns → snapshots, by message count or idle time (SPEC B1–B4).

Layout: :mod:`~mongomem.stages.windowing.logic` (the pure window function),
:mod:`~mongomem.stages.windowing.windower` (records → logic → sinks),
:mod:`~mongomem.stages.windowing.sinks` (MongoDB and Kafka),
:mod:`~mongomem.stages.windowing.consumer` (the aiokafka consumer group and the
changelog-backed table — the default engine), :mod:`~mongomem.stages.windowing.app`
(the same on faust-streaming, ``engine="faust"``, with a workaround for the
records faust loses after a rebalance, see that module) and :mod:`~mongomem.stages.windowing.worker`
(one process: engine, sinks).

Delivery semantics: **at-least-once in, idempotent out.** Turns may arrive
twice or late; a session's state remembers what it promoted, so neither yields
a duplicate or overlapping snapshot. Snapshot ids are
``Snapshot.make_id(session, first_seq, last_seq)``; each snapshot is upserted
into ``snapshots`` and published to the snapshots topic keyed by session —
possibly more than once after a crash or in a replay, always with the same id
and content. The turns are never written to: a snapshot's session and seq
range are the lineage of its turns (:mod:`mongomem.stm.lineage`, one indexed read).

**Checkpoint**: the consumer group's committed offset on the turns topic
plus the ``windows`` table's compacted changelog topic
(``<group>-windows-changelog``, co-partitioned with the turns topic). Snapshots
are delivered before the state that records them is written, and every
changelog write is acknowledged before an offset is committed; each state
carries the position of the last record applied to it, so records read again
after a crash are skipped for the sessions that already saw them. Records are
applied a fetched partition batch at a time, with the same effect as one by one
(snapshots of the whole batch delivered, then each changed state written once).

**Time**: event time only, and the source's progress, never this stage's
clock. A turn's ``created_at``; and the watcher's watermarks
(:class:`~mongomem.models.Watermark`), in-band in every partition of the
turns topic, each promising that every turn created before its ``at`` is
already ahead of it. A window closes on idle only at a watermark at least
``idle_timeout_s`` past its last turn (or at a turn that much later), so the
split is the one the turns' own times make: live, lagging (the watcher down
or behind) and replayed runs close the same windows at the same positions.
Once the watcher is caught up, an idle session closes within
``idle_timeout_s`` + the watcher's lateness and watermark interval
(``MONGOMEM_STM_WATCHER_WATERMARK_LATENESS_S``, ``…_INTERVAL_S``; plus
processing lag) of its last turn. While the watcher is down, no idle window
closes.

**Session ends**: ``end_session`` stores a :class:`~mongomem.models.SessionEnd`
at the session's next seq; the watcher carries it to the session's partition
and the open window closes on it at once (reason ``end``), live and in a
replay. Its seq is passed over; turns after it start the next window.

**Sequence gaps**: turns past a missing seq wait; if the seq has not arrived
``idle_timeout_s`` (event time) after the gap was seen — or the session goes
idle — it is declared lost (logged), the open window closes with reason
``gap`` and the turns after it start the next window. A lost turn arriving
later is ignored as late.

Run with ``mongomem run windowing [--group-suffix S]``.
"""

from __future__ import annotations

import argparse
import logging

from mongomem.settings import Settings
from mongomem.stages.runtime import run_stage
from mongomem.stages.windowing.logic import (
    WindowPolicy,
    WindowResult,
    WindowState,
    advance,
)
from mongomem.stages.windowing.windower import Policies, SnapshotWindower
from mongomem.stages.windowing.worker import WindowingStage, WindowingWorker, settle_heap

__all__ = [
    "Policies",
    "SnapshotWindower",
    "WindowPolicy",
    "WindowResult",
    "WindowState",
    "WindowingWorker",
    "advance",
    "main",
]


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Run the stage until SIGTERM/SIGINT (then stop cleanly), restarting after outages."""
    worker = WindowingWorker(
        settings,
        group_suffix=getattr(args, "group_suffix", "") or "",
        engine=settings.windowing.engine,
    )
    settle_heap()  # this process runs the stage alone: keep its startup heap out of collections
    await run_stage(WindowingStage(worker), settings)
    logging.getLogger("mongomem.windowing").info("windowing stopped")
