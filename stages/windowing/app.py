"""The faust-streaming adapter of the windowing stage (``engine="faust"``; not the default).

The default engine is :mod:`mongomem.stages.windowing.consumer` (plain
aiokafka, same table semantics); this one is the same windower as a faust
agent, for those who choose faust.

**The turn lost across a rebalance was faust's, and is worked around here.**
faust-streaming 0.15.3 (and its master) ends every partition assignment in
``Recovery.on_recovery_completed``, which resumes the source partitions and
only then awaits ``Consumer.perform_seek()`` (the committed offsets, one
broker round trip), with flow already active because the table recovery
resumed it to read the changelog. Records fetched during that await go into
the agent's buffer; the seek resets faust's read offsets to the committed
ones; ``flow_control.resume()`` then clears the buffer; and the next record
the fetcher already holds is more than one past the read offset, which
``Consumer._drain_messages`` takes for a gap in the log: the offsets in
between are counted as acknowledged (``Consumer._add_gap``), the read offset
jumps over them, and the same records fetched again from the committed
offset are dropped as already read. They are never applied, and the next
commit moves past them. :class:`SeekFirstRecovery` is faust's method with the
seek done while the partitions are still paused; the engine installs it
through faust's ``TableManager`` setting. Our agent was not the cause: it
acknowledges a record only after it was applied, and these records never
reach it.

One faust app per consumer group (``<prefix>.windowing[<suffix>]``):

* one agent over the turns topic, ``concurrency=1``, with **manual acks**: a
  record is acknowledged only after :meth:`SnapshotWindower.process` returned
  (snapshots stored and published, state written). faust acks a record in a
  ``finally`` even when the agent body raised, so a record whose processing
  failed for good is never acked: the worker stops instead;
* one plain table ``windows`` (session key → ``WindowState`` JSON), backed by
  its changelog topic, co-partitioned with the turns topic. No windowed
  tables;
* no web server, in-memory store (the changelog is the durable copy; a
  restarted worker recovers the table from it before processing).

Checkpoints: faust commits the offsets of acked records every
``broker_commit_interval`` after flushing the changelog, so the table is never
behind the committed offset; it may be ahead, which the windower's per-session
position stamp makes harmless.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from mongomem.extras import require
from mongomem.settings import Settings
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import SnapshotWindower

with require("faust"):
    import faust
    from faust.tables import TableManager
    from faust.tables.recovery import Recovery

__all__ = ["SeekFirstRecovery", "SeekFirstTableManager", "TableStore", "build_app", "faust_brokers"]

log = logging.getLogger("mongomem.windowing")


class SeekFirstRecovery(Recovery):
    """faust's table recovery, seeking the source partitions *before* resuming them.

    ``on_recovery_completed`` is faust-streaming 0.15.3's own, step for step,
    except for the order at the end: seek to the committed offsets while the
    partitions are paused, resume flow (which clears the stream buffers), and
    only then resume the partitions. So no record is fetched before the seek
    has landed, and none can be taken for a gap (see the module docstring).
    """

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
        callbacks = [
            asyncio.ensure_future(
                table.on_recovery_completed(
                    self.actives_for_table[table], self.standbys_for_table[table]
                )
            )
            for table in self.tables.values()
        ]
        if callbacks:
            await asyncio.wait(callbacks)
        assignment = consumer.assignment()
        if self.app.consumer_generation_id != generation_id:
            self.log.warning(
                "Recovery rebalancing again app id %s param %s",
                self.app.consumer_generation_id,
                generation_id,
            )
            return
        if assignment:
            self.log.info("Seek stream partitions to committed offsets (still paused).")
            await self._wait(consumer.perform_seek(), timeout=self.app.conf.broker_request_timeout)
        self.completed.set()
        self.app.flow_control.resume()
        consumer.resume_flow()
        consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
        await cast(faust.App, self.app)._fetcher.maybe_start()
        self.tables.on_actives_ready()
        if not self.app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        self.app.on_rebalance_end()
        self.log.info("Worker ready")


class SeekFirstTableManager(TableManager):
    """faust's table manager, recovering with :class:`SeekFirstRecovery`."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


def faust_brokers(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


class TableStore:
    """A ``WindowStore`` over a faust table, with a cache of decoded states."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._cache: dict[bytes, WindowState] = {}

    def clear_cache(self) -> None:
        self._cache.clear()

    def get(self, key: bytes) -> WindowState | None:
        state = self._cache.get(key)
        if state is None:
            raw = self._table.get(key)
            if raw is None:
                return None
            state = self._cache[key] = WindowState.model_validate_json(raw)
        return state

    def put(self, key: bytes, state: WindowState) -> None:
        self._table[key] = state.model_dump_json().encode()
        self._cache[key] = state

    def delete(self, key: bytes) -> None:
        self._cache.pop(key, None)
        if key in self._table:
            del self._table[key]  # faust writes the tombstone to the changelog

    def items(self) -> Iterable[tuple[bytes, WindowState]]:
        keys = list(self._table.keys())
        return [(k, s) for k in keys if (s := self.get(k)) is not None]


def build_app(
    settings: Settings,
    *,
    app_id: str,
    partitions: int,
    make_windower: Any,
    failure: asyncio.Future[None],
    **faust_options: Any,
) -> tuple[Any, TableStore]:
    """The faust app, its agent and table. ``make_windower(store)`` builds the windower.

    A record whose processing raised is left unacknowledged and ``failure``
    receives the exception; the caller stops the app.
    """
    bootstrap = settings.kafka.bootstrap or ""
    # The table lives in its changelog topic; faust still makes a data
    # directory (by default in the working directory): keep it out of the way.
    datadir = Path(tempfile.gettempdir()) / "mongomem-faust"
    datadir.mkdir(exist_ok=True)
    options: dict[str, Any] = {
        "broker": faust_brokers(bootstrap),
        "store": "memory://",
        "datadir": datadir / app_id,
        "web_enabled": False,
        "topic_partitions": partitions,
        "topic_replication_factor": settings.kafka.replication_factor,
        "topic_disable_leader": True,
        "consumer_auto_offset_reset": "earliest",
        "key_serializer": "raw",
        "value_serializer": "raw",
        "broker_session_timeout": 10.0,
        "broker_heartbeat_interval": 1.0,
        "broker_commit_interval": 1.0,
        "producer_acks": -1,
        "producer_compression_type": settings.kafka.compression_type,
        # The fix for faust's lost records after an assignment (SeekFirstRecovery).
        "TableManager": SeekFirstTableManager,
    }
    options.update(faust_options)
    app = faust.App(app_id, **options)
    turns = app.topic(settings.kafka.topic("turns"), key_type=bytes, value_type=bytes)
    table = app.Table(
        "windows", default=None, partitions=partitions, key_type=bytes, value_type=bytes
    )
    store = TableStore(table)
    windower: SnapshotWindower = make_windower(store)

    async def forget_derived_state(*_args: Any, **_kwargs: Any) -> None:
        store.clear_cache()
        windower.invalidate_index()

    table.on_recover(forget_derived_state)
    app.on_partitions_assigned.connect(forget_derived_state)

    async def windowing(stream: Any) -> None:
        manual = stream.noack()
        async for event in manual.events():
            message = event.message
            try:
                await windower.process(
                    message.partition, message.offset, message.key, message.value
                )
            except Exception as exc:
                log.exception(
                    "windowing stopped at %s[%d]@%d",
                    message.topic,
                    message.partition,
                    message.offset,
                )
                # Stop without waiting for this record to be acked (it never will be):
                # offsets are committed up to the record before it, and no further.
                app.conf.stream_wait_empty = False
                if not failure.done():
                    failure.set_exception(exc)
                await asyncio.Event().wait()  # never ack this record
            await manual.ack(event)

    app.agent(turns, name="windowing", concurrency=1)(windowing)
    return app, store
