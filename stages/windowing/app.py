"""The faust-streaming adapter of the windowing stage (``engine="faust"``; not the default).

Kept for comparison and because it works in the simple cases, but the default
engine is :mod:`mongomem.stages.windowing.consumer` (plain aiokafka, same table
semantics): in ``test_windows_survive_rebalances_between_two_workers``, when a
second worker joined and the first kept partitions 1 and 2, faust-streaming
0.15.3 never handed one turn of those partitions to the agent (the agent's
counters show 14 of 15 turns; no dead letter, no redelivery) and went on with
later records of the same partitions, so the session's window waited on a hole
— a lost turn. A likely mechanism, from faust's ``streams.py``: a record that
reaches a stream while flow control is suspended (as during recovery), or that
was fetched in an older consumer generation, is "skipped" — and acknowledged.

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
from typing import Any

from mongomem.extras import require
from mongomem.settings import Settings
from mongomem.stages.windowing.logic import WindowState
from mongomem.stages.windowing.windower import SnapshotWindower

with require("faust"):
    import faust

__all__ = ["TableStore", "build_app", "faust_brokers"]

log = logging.getLogger("mongomem.windowing")


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
