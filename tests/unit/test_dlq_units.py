"""Dead-letter helpers that need no servers: decoding, addressing, refusals."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import encode
from mongomem.errors import InputError
from mongomem.ltm.testing import candidate
from mongomem.operations.dlq import (
    REQUEUE_HEADER,
    DeadLetterEntry,
    addressed_to,
    decoded_original,
    requeue,
)
from mongomem.settings import KafkaSettings, load_settings
from mongomem.stages.extractor.worker import TypeConsumer
from mongomem.stages.runtime import consume
from mongomem.stages.runtime.memory import MemoryBroker


def test_addressed_to_reads_the_requeue_header() -> None:
    assert addressed_to(None, "extractor.semantic")
    assert addressed_to([("other", b"x")], "extractor.semantic")
    assert addressed_to([(REQUEUE_HEADER, b"extractor.semantic")], "extractor.semantic")
    assert not addressed_to([(REQUEUE_HEADER, b"extractor.episodic")], "extractor.semantic")


def test_original_bytes_decode_to_json_text_or_base64() -> None:
    c = candidate("semantic", user_id="u", label="k", text="t", snapshot="s")
    assert decoded_original(encode(c))["kind"] == "candidate"
    assert decoded_original(b"plain words") == "plain words"
    assert decoded_original(b"\xff\xfe") == "base64://4="
    assert decoded_original(None) is None


def _letter(topic: str) -> DeadLetterEntry:
    letter = DeadLetter.of(
        stage="watcher",
        topic=topic,
        partition=0,
        offset=0,
        key=None,
        value=b"{}",
        error=ValueError("not a turn"),
        attempts=1,
    )
    return DeadLetterEntry("p.dlq.watcher", 0, 3, letter)


def test_watcher_dead_letters_are_not_requeued_and_nothing_is_published() -> None:
    settings = load_settings()  # no servers configured: refused before any connection
    with pytest.raises(InputError, match="came from MongoDB"):
        asyncio.run(requeue(settings, [_letter("mongodb:db.turns")]))


@dataclass
class _Record:
    offset: int
    headers: tuple[tuple[str, bytes], ...]
    topic: str = "p.snapshots"
    partition: int = 0
    key: bytes | None = b"k"
    value: bytes | None = b"v"


@dataclass
class _Handler:
    stage: str = "extractor.semantic"
    seen: list[int] = field(default_factory=list)

    async def handle(self, record: Any) -> None:
        self.seen.append(record.offset)


def test_an_extractor_skips_records_requeued_for_another_type_and_commits_past_them() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("p.snapshots", b"s0", partition=0)
    broker.append(
        "p.snapshots", b"s1", partition=0, headers=((REQUEUE_HEADER, b"extractor.episodic"),)
    )
    broker.append(
        "p.snapshots", b"s2", partition=0, headers=((REQUEUE_HEADER, b"extractor.semantic"),)
    )
    handler = _Handler()
    worker = TypeConsumer(handler)  # type: ignore[arg-type]

    async def run() -> None:
        stop = asyncio.Event()
        source = broker.source("p.snapshots", "g")
        task = asyncio.create_task(
            consume(
                source,
                worker,
                publisher=broker.publisher(),
                kafka=KafkaSettings(),
                stop=stop,
                poll_timeout_s=0.01,
            )
        )
        for _ in range(1000):
            if broker.committed("g", "p.snapshots"):
                break
            await asyncio.sleep(0.005)
        stop.set()
        await task

    asyncio.run(run())
    assert handler.seen == [0, 2]
    assert broker.committed("g", "p.snapshots") == {0: 3}
