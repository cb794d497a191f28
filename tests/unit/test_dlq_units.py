"""Dead-letter helpers that need no servers: decoding, addressing, refusals."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from mongomem.codec import encode
from mongomem.dlq import REQUEUE_HEADER, DeadLetterEntry, addressed_to, decoded_original, requeue
from mongomem.errors import InputError
from mongomem.kafka import DeadLetter
from mongomem.ltm.testing import candidate
from mongomem.settings import load_settings
from mongomem.stages.extractor.worker import TypeConsumer


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


@dataclass
class _Consumer:
    batches: list[dict[Any, list[_Record]]]
    committed: list[dict[Any, int]] = field(default_factory=list)

    async def getmany(self, **_: Any) -> dict[Any, list[_Record]]:
        if not self.batches:
            raise asyncio.CancelledError
        return self.batches.pop(0)

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.committed.append(offsets)


def test_an_extractor_skips_records_requeued_for_another_type_and_commits_past_them() -> None:
    records = [
        _Record(0, ()),
        _Record(1, ((REQUEUE_HEADER, b"extractor.episodic"),)),
        _Record(2, ((REQUEUE_HEADER, b"extractor.semantic"),)),
    ]
    handler, consumer = _Handler(), _Consumer([{"tp": records}])
    worker = TypeConsumer(handler, consumer, batch_size=10)  # type: ignore[arg-type]
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(worker.run())
    assert handler.seen == [0, 2]
    assert consumer.committed == [{"tp": 3}]
