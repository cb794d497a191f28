"""Dead letters an operator can act on: list, show (original bytes decoded), requeue.

A stage that cannot process a record sends a :class:`~mongomem.adapters.kafka.DeadLetter`
to ``dlq.<stage>``. The dead letter names its *source* (topic, partition,
offset) and keeps the original key and value bytes. Once the cause is fixed
(an LLM that answers again, a schema the stage now reads …), :func:`requeue`
publishes those original bytes back onto the source topic so the stage
processes them again.

Guarantees:

- **Requeued once.** Every requeue is recorded in MongoDB (collection
  ``dlq_requeues``, ``_id`` = dead-letter topic:partition:offset) *after*
  Kafka acknowledged the republished record. A dead letter already recorded
  is skipped, so requeueing twice changes nothing the second time. A crash
  between the ack and the record may republish once more on the next
  requeue; that duplicate meets the stages' idempotent sinks (deterministic
  ids, the reconciler's ledger), so it changes nothing either.
- **Addressed.** A requeued record carries the header
  ``mongomem-requeue-for: <stage>``; a stage that shares the source topic
  with others (one extractor group per memory type reads ``snapshots``)
  skips records addressed to another stage (:func:`addressed_to`).
- The watcher's dead letters are MongoDB documents, not Kafka records: they
  cannot be requeued (fix and re-insert the document instead); trying says so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongomem.adapters.kafka import DeadLetter, dead_letter_topic, make_producer
from mongomem.adapters.mongo import Document, connect, database
from mongomem.codec import decode
from mongomem.errors import BrokerError, InputError, MessageDecodeError, StorageError
from mongomem.extras import require
from mongomem.models import utcnow
from mongomem.operations.status import topic_partitions
from mongomem.settings import Settings

with require("stages"):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

__all__ = [
    "REQUEUES",
    "REQUEUE_HEADER",
    "DeadLetterEntry",
    "RequeueReport",
    "addressed_to",
    "decoded_original",
    "list_dead_letters",
    "requeue",
]

#: MongoDB collection recording what was requeued (one document per dead letter).
REQUEUES = "dlq_requeues"
#: Kafka header naming the stage a requeued record is meant for.
REQUEUE_HEADER = "mongomem-requeue-for"


def addressed_to(headers: Iterable[tuple[str, bytes]] | None, stage: str) -> bool:
    """Whether a consumed record is for ``stage``: no requeue header, or one naming it."""
    for name, value in headers or ():
        if name == REQUEUE_HEADER:
            return value.decode(errors="replace") == stage
    return True


@dataclass(frozen=True)
class DeadLetterEntry:
    """One dead letter as it sits in its topic, plus whether it was requeued."""

    topic: str
    partition: int
    offset: int
    letter: DeadLetter
    requeued_at: datetime | None = None

    @property
    def id(self) -> str:
        """``<dead-letter topic>:<partition>:<offset>``: what ``show``/``requeue`` take."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def summary(self) -> dict[str, Any]:
        letter = self.letter
        return {
            "id": self.id,
            "stage": letter.stage,
            "failed_at": letter.failed_at.isoformat(),
            "source": f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset}",
            "error": f"{letter.error_class}: {letter.error}",
            "requeued_at": self.requeued_at.isoformat() if self.requeued_at else None,
        }

    def detail(self) -> dict[str, Any]:
        """Everything about the dead letter, with the original key and value decoded."""
        key = base64.b64decode(self.letter.key_b64) if self.letter.key_b64 is not None else None
        return {
            **self.summary(),
            "attempts": self.letter.attempts,
            "retriable": self.letter.retriable,
            "key": _text(key),
            "value": decoded_original(self.letter.original_value()),
        }


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def decoded_original(raw: bytes | None) -> Any:
    """The original value made readable: a message envelope or JSON as JSON, else text.

    Bytes that are not UTF-8 come back as ``"base64:…"``; nothing is dropped.
    """
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _text(raw)


async def list_dead_letters(
    settings: Settings, stages: Sequence[str], *, since: datetime | None = None
) -> list[DeadLetterEntry]:
    """Every dead letter of ``stages`` (failed at or after ``since``), oldest first per topic.

    Reads each dead-letter topic from its beginning to its current end without
    a consumer group (nothing is committed), and marks the requeued ones.
    """
    topics = [dead_letter_topic(settings.kafka, s) for s in stages]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap, enable_auto_commit=False
    )
    entries: list[DeadLetterEntry] = []
    try:
        await consumer.start()
        for topic in topics:
            parts = await topic_partitions(settings.kafka, topic)
            entries.extend(await _read_topic(consumer, topic, parts))
    except KafkaError as exc:
        raise BrokerError(f"could not read the dead-letter topics: {exc}") from exc
    finally:
        await consumer.stop()
    if since is not None:
        entries = [e for e in entries if e.letter.failed_at >= since]
    if not entries:
        return entries
    done = await _requeued(settings, [e.id for e in entries])
    return [
        DeadLetterEntry(e.topic, e.partition, e.offset, e.letter, done.get(e.id)) for e in entries
    ]


async def _read_topic(
    consumer: AIOKafkaConsumer, topic: str, parts: Sequence[int]
) -> list[DeadLetterEntry]:
    if not parts:
        return []  # no such topic: the stage never dead-lettered anything
    partitions = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(partitions)
    begins = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    entries: list[DeadLetterEntry] = []
    for tp in partitions:
        if ends[tp] <= begins[tp]:
            continue
        consumer.seek(tp, begins[tp])
        while await consumer.position(tp) < ends[tp]:
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 30)
            for record in batch.get(tp, []):
                if record.offset >= ends[tp]:
                    break
                entries.append(_entry(topic, tp.partition, record.offset, record.value))
    return entries


def _entry(topic: str, partition: int, offset: int, value: bytes | None) -> DeadLetterEntry:
    try:
        letter = decode(value, DeadLetter)
    except MessageDecodeError as exc:
        raise InputError(f"{topic}:{partition}:{offset} is not a dead letter: {exc}") from exc
    return DeadLetterEntry(topic, partition, offset, letter)


async def _requeued(settings: Settings, ids: Sequence[str]) -> dict[str, datetime]:
    client: AsyncMongoClient[Document] = connect(settings.mongodb)
    try:
        found = database(client, settings.mongodb)[REQUEUES].find({"_id": {"$in": list(ids)}})
        return {doc["_id"]: doc["requeued_at"] async for doc in found}
    except PyMongoError as exc:
        raise StorageError(f"could not read the requeue records: {exc}") from exc
    finally:
        await client.close()


@dataclass(frozen=True)
class RequeueReport:
    requeued: tuple[str, ...]
    skipped: tuple[str, ...]  # already requeued before


async def requeue(settings: Settings, entries: Sequence[DeadLetterEntry]) -> RequeueReport:
    """Republish the original record of each entry to its source topic, once.

    Entries already recorded as requeued are skipped. Raises
    :class:`InputError` (before publishing anything) for a dead letter that
    has no Kafka source (the watcher's).
    """
    for entry in entries:
        if entry.letter.source_topic.startswith("mongodb:"):
            raise InputError(
                f"{entry.id} came from MongoDB ({entry.letter.source_topic}), not Kafka: "
                "fix the document and insert it again; it cannot be requeued"
            )
    done = await _requeued(settings, [e.id for e in entries]) if entries else {}
    todo = [e for e in entries if e.id not in done]
    client: AsyncMongoClient[Document] = connect(settings.mongodb)
    producer = make_producer(settings.kafka)
    requeued: list[str] = []
    try:
        await producer.start()
        records = database(client, settings.mongodb)[REQUEUES]
        for entry in todo:
            letter = entry.letter
            key = base64.b64decode(letter.key_b64) if letter.key_b64 is not None else None
            await producer.send_and_wait(
                letter.source_topic,
                letter.original_value(),
                key=key,
                headers=[(REQUEUE_HEADER, letter.stage.encode())],
            )
            record = {
                "_id": entry.id,
                "stage": letter.stage,
                "requeued_at": utcnow(),
                "source_topic": letter.source_topic,
                "source_partition": letter.source_partition,
                "source_offset": letter.source_offset,
            }
            # A concurrent requeue may have recorded it first; its duplicate is harmless.
            with contextlib.suppress(DuplicateKeyError):
                await records.insert_one(record)
            requeued.append(entry.id)
    except KafkaError as exc:
        raise BrokerError(f"could not requeue to Kafka: {exc}") from exc
    except PyMongoError as exc:
        raise StorageError(f"could not record the requeue: {exc}") from exc
    finally:
        await producer.stop()
        await client.close()
    return RequeueReport(tuple(requeued), tuple(e.id for e in entries if e.id in done))
