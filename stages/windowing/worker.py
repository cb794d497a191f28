"""``WindowingWorker``: one windowing process — engine, sinks, stats — until cancelled.

The stage reads no clock and produces nothing into the turns topic: idle
windows close on the watcher's in-band watermarks
(:class:`~mongomem.models.Watermark`), which follow the source's progress. A
windowing process's own clock would mistake an outage or a lag of the
watcher for idleness (and a replay would not repeat it).

:func:`settle_heap` is for the stage's own process (``mongomem run windowing``
calls it before it starts): the stage allocates a few objects per record, so
the collector runs often, and each full collection walks every object of the
process — tens of thousands after the imports alone (modules, classes,
pydantic schemas), which made the full collections a large part of the
stage's CPU time while draining a backlog (``bench/results/windowing.md``).
Freezing what is alive at the start keeps those out of every later collection,
and a young generation of :data:`YOUNG_OBJECTS` (Python's default is 700)
lets a batch's short-lived objects die by reference counting before a
collection walks them: with the default, the collector took about 5 µs of the
stage's work per turn of a backlog, with this about 1.7 µs.

Output goes through two producers: the snapshots (and dead letters) through
one, the changelog's states through another, so that a checkpoint's states
and a delivery's snapshots do not wait for each other's requests (a producer
keeps one request in flight per broker, holding one batch per partition).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.kafka import SNAPSHOTS, TURNS, dead_letter_topic, ensure_topics
from mongomem.adapters.mongo import Document, connect, database
from mongomem.erasure.register import NOT_ERASED_TTL_S, ErasureRegister
from mongomem.models import Snapshot
from mongomem.operations.status import consumer_group
from mongomem.project_config import load_project_config
from mongomem.settings import Settings
from mongomem.stages.runtime import PublishedDeadLetters, unless_stopped
from mongomem.stages.runtime.kafka import KafkaPartitionReader, kafka_publisher
from mongomem.stages.windowing.consumer import ChangelogTable, WindowingConsumer, ensure_changelog
from mongomem.stages.windowing.sinks import SnapshotPublisher, SnapshotResumePoints
from mongomem.stages.windowing.windower import STAGE, Policies, SnapshotWindower, WindowStore

__all__ = ["WindowingStage", "WindowingWorker", "settle_heap"]

#: The producers' batch size, uncompressed (a broker's ``max.message.bytes`` must allow it; its
#: default is 1 MiB). A delivery's snapshots go to one partition, one batch per request:
#: the larger the batch, the fewer requests one after the other.
PRODUCER_BATCH_BYTES = 1_000_000
#: Collections of the youngest generation happen after this many new objects (not 700).
YOUNG_OBJECTS = 50_000

log = logging.getLogger("mongomem.windowing")

#: How long the stage relies on a "not erased" answer (half of what an erasure allows).
ERASED_CHECK_TTL_S = NOT_ERASED_TTL_S / 2

#: How long a stop may wait for the record in flight (a retry in progress) to finish.
STOP_TIMEOUT_S = 30.0
#: How often the counters are logged (when they changed).
STATS_EVERY_S = 5.0


def settle_heap() -> None:
    """Collect garbage, then exempt every object alive now from later collections.

    For a process about to run the stage: its modules, classes and schemas
    stay alive anyway, and are no longer walked by each full collection.
    Process-wide (:func:`gc.freeze`, :func:`gc.set_threshold`); objects created
    later are collected as usual, only less often (every :data:`YOUNG_OBJECTS` new
    objects), and a frozen object freed by reference counting is still freed.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def stage_register(db: AsyncDatabase[Document]) -> ErasureRegister:
    """The register the windower and the snapshot sink share (SPEC J3).

    It keeps a "not erased" answer for :data:`ERASED_CHECK_TTL_S`: a batch's sessions are
    checked when it is planned, and its delivery moments later relies on that
    answer instead of reading again, as do the next batches of the same sessions
    (a backlog's batches of one partition hold the same sessions). A snapshot sent
    on such an answer lands well inside what an erasure allows for it
    (:func:`mongomem.erasure.erase.erase` sweeps again
    :data:`~mongomem.erasure.register.NOT_ERASED_TTL_S` plus a landing time after
    writing the register).
    """
    return ErasureRegister(db, remember_absent=True, absent_ttl_s=ERASED_CHECK_TTL_S)


def _forward(task: asyncio.Task[None], failure: asyncio.Future[None]) -> None:
    """The consumer task ended: pass its error (or its end) on to ``failure``."""
    if failure.done():
        return
    if task.cancelled():
        failure.cancel()
    elif (exc := task.exception()) is not None:
        failure.set_exception(exc)
    else:
        failure.set_result(None)


class WindowingWorker:
    """Runs the windowing stage in the current event loop until cancelled."""

    def __init__(
        self,
        settings: Settings,
        *,
        group_suffix: str = "",
        on_snapshot: Callable[[Snapshot], None] | None = None,
        engine: Literal["aiokafka", "faust"] = "aiokafka",
        **faust_options: Any,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.group_suffix = group_suffix
        self.group = consumer_group(settings.kafka, STAGE, group_suffix)
        self.on_snapshot = on_snapshot
        self.faust_options = faust_options
        self.windower: SnapshotWindower | None = None
        self.started = asyncio.Event()

    async def run(self) -> None:
        settings = self.settings
        kafka = settings.kafka
        turns, snapshots = kafka.topic(TURNS), kafka.topic(SNAPSHOTS)
        await ensure_topics(kafka, [turns, snapshots, dead_letter_topic(kafka, STAGE)])
        config = None
        if settings.project_config is not None:
            config = load_project_config(settings.project_config).memory.windowing
        policies = Policies(settings.windowing, config)
        client = connect(settings.mongodb)
        app: Any = None
        reporter: asyncio.Task[None] | None = None
        consuming: asyncio.Task[None] | None = None
        stack = contextlib.AsyncExitStack()
        try:
            # Snapshots and changelog states are sent many at a time and are kilobytes each:
            # large batches carry one partition's share of a delivery in one request.
            publisher = await stack.enter_async_context(
                kafka_publisher(kafka, linger_ms=0, max_batch_size=PRODUCER_BATCH_BYTES)
            )
            partitions = await publisher.partitions(turns)
            db = database(client, settings.mongodb)
            erasures = stage_register(db)
            sink = SnapshotPublisher(db, publisher, snapshots, erasures)
            resume = SnapshotResumePoints(db)
            await resume.ensure_index()
            dead = PublishedDeadLetters(publisher, kafka)
            failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def make_windower(store: WindowStore) -> SnapshotWindower:
                self.windower = SnapshotWindower(
                    store=store,
                    sink=sink,
                    policies=policies,
                    dead_letters=dead,
                    topic=turns,
                    on_snapshot=self.on_snapshot,
                    resume=resume,
                    erasures=erasures,
                )
                return self.windower

            if self.engine == "faust":
                # only here: the faust engine is the `faust` extra; the default needs none
                from mongomem.stages.windowing.app import build_app

                app, _ = build_app(
                    settings,
                    app_id=self.group,
                    partitions=len(partitions),
                    make_windower=make_windower,
                    failure=failure,
                    **self.faust_options,
                )
                await app.start()
            else:
                changelog = f"{self.group}-windows-changelog"
                await ensure_changelog(kafka, changelog, len(partitions))
                states = await stack.enter_async_context(  # its own requests (module docstring)
                    kafka_publisher(kafka, linger_ms=0, max_batch_size=PRODUCER_BATCH_BYTES)
                )
                table = ChangelogTable(states, changelog, KafkaPartitionReader(kafka))
                consumer = WindowingConsumer(
                    kafka,
                    group_suffix=self.group_suffix,
                    topic=turns,
                    table=table,
                    windower=make_windower(table),
                    publisher=publisher,
                )
                consuming = asyncio.create_task(consumer.run())
                consuming.add_done_callback(lambda task: _forward(task, failure))
                ready: asyncio.Task[Any] = asyncio.create_task(consumer.ready.wait())
                waits: list[asyncio.Future[Any]] = [ready, failure]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                ready.cancel()
            reporter = asyncio.create_task(self._report())
            self.started.set()
            log.info(
                "windowing (%s) running as %s over %d partitions",
                self.engine,
                self.group,
                len(partitions),
            )
            await failure
        finally:
            if consuming is not None and not consuming.done():
                consuming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await consuming
            if reporter is not None:
                reporter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporter
            if app is not None:
                try:
                    await asyncio.wait_for(app.stop(), STOP_TIMEOUT_S)
                except TimeoutError:
                    log.error("faust did not stop within %s s; leaving it", STOP_TIMEOUT_S)
            await stack.aclose()
            await client.close()

    async def _report(self) -> None:
        """Log the counters every ``STATS_EVERY_S`` when they changed."""
        reported = ""
        while True:
            await asyncio.sleep(STATS_EVERY_S)
            if self.windower is not None:
                stats = str(self.windower.stats)
                if stats != reported:
                    log.info("%s", stats)
                reported = stats


class WindowingStage:
    """The windowing stage as a runtime :class:`~mongomem.stages.runtime.ports.Stage`: a stop
    ends the worker, which lets the batches in flight go (they are read again) and commits
    what was applied."""

    name = STAGE

    def __init__(self, worker: WindowingWorker) -> None:
        self.worker = worker

    async def run(self, stop: asyncio.Event) -> None:
        await unless_stopped(stop, self.worker.run())
