"""Operating the pipeline: consumer lag, dead-letter counts, replay positions.

Consumer groups are named ``<topic prefix>.<stage>[<suffix>]`` (see
:func:`consumer_group`); a replay runs a stage in a *new* group (a suffix)
whose start position is set here before the stage starts, so the live group
is never disturbed and the replay's writes meet the stages' idempotent sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from mongomem.adapters.kafka import CANDIDATES, SNAPSHOTS, TURNS, DeadLetter, dead_letter_topic
from mongomem.codec import decode, peek_kind
from mongomem.errors import BrokerError, MessageDecodeError, MongomemError
from mongomem.extras import require
from mongomem.settings import KafkaSettings

with require("stages"):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

__all__ = [
    "MARKER_SCAN_LIMIT",
    "GroupLag",
    "consumer_group",
    "dead_letter_counts",
    "group_lag",
    "recent_dead_letters",
    "set_group_position",
    "stage_groups",
    "topic_partitions",
]


def consumer_group(settings: KafkaSettings, stage: str, suffix: str = "") -> str:
    """The consumer group of ``stage`` (``extractor.semantic``, ``reconciler`` …)."""
    return f"{settings.topic_prefix}.{stage}{suffix}"


def stage_groups(
    kafka: KafkaSettings, stage: str, types: tuple[str, ...], suffix: str = ""
) -> list[tuple[str, str]]:
    """(consumer group, input topic) of each consumer group that ``stage`` runs."""
    if stage == "windowing":
        return [(consumer_group(kafka, "windowing", suffix), kafka.topic(TURNS))]
    if stage == "extractor":
        return [
            (consumer_group(kafka, f"extractor.{t}", suffix), kafka.topic(SNAPSHOTS)) for t in types
        ]
    if stage == "reconciler":
        return [(consumer_group(kafka, "reconciler", suffix), kafka.topic(CANDIDATES))]
    raise MongomemError(f"stage {stage!r} does not consume from Kafka")


#: How many uncommitted records :func:`group_lag` reads at most to count markers.
MARKER_SCAN_LIMIT = 1000


@dataclass(frozen=True)
class GroupLag:
    """A group's position on a topic, summed over partitions.

    ``markers`` counts the uncommitted records that are in-band markers (the
    watcher's watermarks, say) rather than data, when asked for and when at
    most :data:`MARKER_SCAN_LIMIT` records are uncommitted; ``data_lag`` is
    the lag without them, which is what an idle pipeline keeps at 0.
    """

    group: str
    topic: str
    committed: int
    end: int
    markers: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)

    @property
    def data_lag(self) -> int:
        return max(0, self.lag - self.markers)


async def _end_offsets(settings: KafkaSettings, topics: Iterable[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in await topic_partitions(settings, topic)
        ]
        if not partitions:
            return {}
        ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
        return ends
    finally:
        await consumer.stop()


async def topic_partitions(settings: KafkaSettings, topic: str) -> list[int]:
    """The partition numbers of ``topic`` (none if it does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(
        int(part["partition"])
        for entry in described
        if entry.get("topic") == topic and not entry.get("error_code")
        for part in entry.get("partitions", [])
    )


async def group_lag(
    settings: KafkaSettings, group: str, topic: str, *, markers: frozenset[str] = frozenset()
) -> GroupLag:
    """Committed position and end of ``topic`` for ``group``, summed over partitions.

    With ``markers`` (message kinds, e.g. ``{"watermark"}``), the uncommitted
    records of those kinds are counted too (see :class:`GroupLag`).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        await admin.start()
        for attempt in range(20):
            try:
                offsets = await admin.list_consumer_group_offsets(group)
                break
            except KafkaError as exc:
                # A young cluster has no group coordinator until __consumer_offsets exists.
                if not getattr(exc, "retriable", False) or attempt == 19:
                    raise
                await asyncio.sleep(0.5)
        ends = await _end_offsets(settings, [topic])
        starts = {tp: max(meta.offset, 0) for tp, meta in offsets.items() if tp.topic == topic}
        behind = sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())
        counted = 0
        if markers and 0 < behind <= MARKER_SCAN_LIMIT:
            counted = await _count_kinds(settings, starts, ends, markers)
    except KafkaError as exc:
        raise BrokerError(f"could not read the lag of {group}: {exc}") from exc
    finally:
        await admin.close()
    end = sum(ends.values())
    return GroupLag(group, topic, committed=sum(starts.values()), end=end, markers=counted)


async def _count_kinds(
    settings: KafkaSettings,
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    kinds: frozenset[str],
) -> int:
    """Records of ``kinds`` between ``starts`` and ``ends`` (read without a group)."""
    behind = [tp for tp, end in ends.items() if end > starts.get(tp, 0)]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, enable_auto_commit=False)
    await consumer.start()
    count = 0
    try:
        consumer.assign(behind)
        for tp in behind:
            consumer.seek(tp, starts.get(tp, 0))
            while await consumer.position(tp) < ends[tp]:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 15)
                records = [r for r in batch.get(tp, []) if r.offset < ends[tp]]
                count += sum(1 for r in records if peek_kind(r.value) in kinds)
    finally:
        await consumer.stop()
    return count


async def dead_letter_counts(settings: KafkaSettings, stages: Iterable[str]) -> dict[str, int]:
    """Records ever written to each stage's dead-letter topic (0 if it has none)."""
    counts: dict[str, int] = {}
    try:
        ends = await _end_offsets(settings, [dead_letter_topic(settings, s) for s in stages])
    except KafkaError as exc:
        raise BrokerError(f"could not read dead-letter topics: {exc}") from exc
    for stage in stages:
        topic = dead_letter_topic(settings, stage)
        counts[stage] = sum(v for tp, v in ends.items() if tp.topic == topic)
    return counts


async def recent_dead_letters(
    settings: KafkaSettings, stages: Iterable[str], per_partition: int = 50
) -> list[DeadLetter]:
    """The last ``per_partition`` records of each stage's dead-letter topic, decoded.

    Reads each partition from ``end - per_partition`` to the end it had when
    called (so it returns even while letters keep arriving); a record that is
    not a dead letter is skipped. Newest first.
    """
    topics = [dead_letter_topic(settings, s) for s in stages]
    letters: list[DeadLetter] = []
    try:
        ends = await _end_offsets(settings, topics)
        wanted = {tp: end for tp, end in ends.items() if end > 0}
        if not wanted:
            return []
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign(list(wanted))
            for tp, end in wanted.items():
                consumer.seek(tp, max(0, end - per_partition))
            open_parts = dict(wanted)
            while open_parts:
                batches = await consumer.getmany(*open_parts, timeout_ms=1000, max_records=500)
                if not batches:
                    break  # nothing more arrives: what is there has been read
                for tp, records in batches.items():
                    for record in records:
                        with contextlib.suppress(MessageDecodeError):
                            letters.append(decode(record.value, DeadLetter))
                    if records and records[-1].offset + 1 >= open_parts.get(tp, 0):
                        open_parts.pop(tp, None)
        finally:
            await consumer.stop()
    except KafkaError as exc:
        raise BrokerError(f"could not read dead-letter topics: {exc}") from exc
    letters.sort(key=lambda letter: letter.failed_at, reverse=True)
    return letters


async def set_group_position(
    settings: KafkaSettings,
    group: str,
    topic: str,
    *,
    offset: int | None = None,
    since: datetime | None = None,
) -> dict[int, int]:
    """Commit a start position for a (new) group: an offset, or the first record at ``since``.

    Returns the committed offset per partition. With neither argument the
    group starts at the beginning of the topic.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in await topic_partitions(settings, topic)]
        if not partitions:
            raise BrokerError(f"topic {topic} does not exist")
        consumer.assign(partitions)
        starts: dict[TopicPartition, int]
        if since is not None:
            stamp = int(since.timestamp() * 1000)
            found = await consumer.offsets_for_times({tp: stamp for tp in partitions})
            ends = await consumer.end_offsets(partitions)
            starts = {tp: (found[tp].offset if found[tp] else ends[tp]) for tp in partitions}
        else:
            begins = await consumer.beginning_offsets(partitions)
            starts = {tp: max(offset or 0, begins[tp]) for tp in partitions}
        await consumer.commit(starts)
        return {tp.partition: off for tp, off in starts.items()}
    except KafkaError as exc:
        raise BrokerError(f"could not set the position of {group}: {exc}") from exc
    finally:
        await consumer.stop()
