"""The reconciler on the runtime's in-memory broker: a candidate MongoDB refuses for good
is dead-lettered once and the partition goes on (it used to be retried forever)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from bson.errors import InvalidBSON
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DocumentTooLarge,
    NotPrimaryError,
    OperationFailure,
    WriteError,
)

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import decode, encode
from mongomem.errors import StorageError
from mongomem.ltm.testing import candidate
from mongomem.metrics import DEAD_LETTERS
from mongomem.models import MemoryCandidate
from mongomem.operations.status import consumer_group
from mongomem.settings import KafkaSettings
from mongomem.stages.reconciler import POLICY
from mongomem.stages.reconciler.stage import Reconciler
from mongomem.stages.runtime import consume
from mongomem.stages.runtime.kafka import consumer_options
from mongomem.stages.runtime.memory import MemoryBroker

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="t")


def _storage_error(cause: BaseException) -> StorageError:
    try:
        raise cause
    except Exception:
        return StorageError("MongoDB write failed")  # as the store's adapters raise it


@pytest.mark.parametrize(
    "cause",
    [
        DocumentTooLarge("BSON document too large"),
        InvalidBSON("bad"),
        WriteError("Document failed validation", 121),
        OperationFailure("unknown operator", 2),
        BulkWriteError({"writeErrors": [{"code": 2, "index": 0}]}),
    ],
)
def test_permanent_pymongo_errors_are_not_retriable(cause: BaseException) -> None:
    assert not _storage_error(cause).retriable


@pytest.mark.parametrize(
    "cause",
    [
        AutoReconnect("connection reset"),
        NotPrimaryError("not primary"),
        OperationFailure("not writable primary", 10107),
        WriteError("WriteConflict", 112),
        ValueError("not pymongo's: not judged"),
    ],
)
def test_transient_pymongo_errors_stay_retriable(cause: BaseException) -> None:
    assert _storage_error(cause).retriable


class _NotErased:
    async def is_erased(self, *_: Any) -> bool:
        return False


class _Store:
    """Applies candidates; refuses the poisoned one like MongoDB refuses a huge document."""

    db = None

    def __init__(self, poisoned: str) -> None:
        self.poisoned = poisoned
        self.applied: list[str] = []
        self.tries: dict[str, int] = {}

    async def reconcile_many(self, candidates: Sequence[MemoryCandidate]) -> list[Any]:
        for c in candidates:
            self.tries[c.candidate_id] = self.tries.get(c.candidate_id, 0) + 1
            if c.candidate_id == self.poisoned:
                raise _storage_error(DocumentTooLarge("BSON document too large (17 MB)"))
        self.applied += [c.candidate_id for c in candidates]
        return [
            type("O", (), {"replayed": False, "action": type("A", (), {"value": "ADD"})})()
            for _ in candidates
        ]


async def test_a_poisoned_candidate_is_dead_lettered_and_the_partition_goes_on() -> None:
    broker = MemoryBroker(partitions=1)
    cands = [
        candidate("semantic", label=f"l{i}", text=f"fact {i}", snapshot=f"s{i}") for i in range(3)
    ]
    for c in cands:
        broker.append("t.candidates", encode(c), key=c.scope.kafka_key(), partition=0)
    store = _Store(poisoned=cands[1].candidate_id)
    reconciler = Reconciler(store, erasures=_NotErased())  # type: ignore[arg-type]
    before = DEAD_LETTERS.labels("reconciler")._value.get()
    stop = asyncio.Event()
    source = broker.source("t.candidates", "t.reconciler")
    task = asyncio.create_task(
        consume(
            source,
            reconciler,
            publisher=broker.publisher(),
            kafka=KAFKA,
            stop=stop,
            policy=POLICY,
            poll_timeout_s=0.01,
        )
    )
    while broker.committed("t.reconciler", "t.candidates") != {0: 3}:
        assert not task.done()
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert cands[0].candidate_id in store.applied
    assert cands[2].candidate_id in store.applied
    assert store.tries[cands[1].candidate_id] == 2  # in the batch, then alone: dead-lettered
    (record,) = broker.records("t.dlq.reconciler")
    letter = decode(record.value, DeadLetter)
    assert (letter.error_class, letter.retriable, letter.source_offset) == (
        "StorageError",
        False,
        1,
    )
    assert DEAD_LETTERS.labels("reconciler")._value.get() == before + 1


def test_the_group_is_named_by_ops_consumer_group() -> None:
    options = consumer_options(KAFKA, "reconciler", "-replay")
    assert options["group_id"] == consumer_group(KAFKA, "reconciler", "-replay")
    assert options["enable_auto_commit"] is False
