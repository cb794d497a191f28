"""The changelog table sends each changed session's latest state once per send (issue 4)."""

from __future__ import annotations

import asyncio
from typing import Any

from mongomem.stages.runtime.memory import MemoryBroker
from mongomem.stages.runtime.ports import Headers
from mongomem.stages.windowing.consumer import ChangelogTable
from mongomem.stages.windowing.logic import WindowState


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, int]] = []

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> Any:
        # (a recording Publisher: the changelog names the key and partition of every write)
        assert value is not None
        assert key is not None
        assert partition is not None
        self.sent.append((topic, key, value, partition))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def flush(self) -> None:
        pass


def state(session: str, next_seq: int, partition: int, offset: int) -> WindowState:
    return WindowState(
        project_id="p",
        user_id="u",
        session_id=session,
        next_seq=next_seq,
        partition=partition,
        offset=offset,
    )


async def test_only_the_latest_state_of_each_session_is_sent_and_flush_sends_the_rest() -> None:
    producer = RecordingProducer()
    table = ChangelogTable(producer, "changelog", MemoryBroker())
    table.put(b"a", state("a", 2, 0, 10))
    table.put(b"b", state("b", 5, 1, 11))
    table.put(b"a", state("a", 3, 0, 12))
    assert table.get(b"a") == state("a", 3, 0, 12), "reads see the latest state at once"
    await table.send_pending()
    assert [(k, WindowState.model_validate_json(v), p) for _, k, v, p in producer.sent] == [
        (b"a", state("a", 3, 0, 12), 0),
        (b"b", state("b", 5, 1, 11), 1),
    ]
    await table.send_pending()
    assert len(producer.sent) == 2, "nothing changed since: nothing is sent again"
    table.put(b"b", state("b", 6, 1, 13))
    await table.flush()
    assert WindowState.model_validate_json(producer.sent[-1][2]) == state("b", 6, 1, 13)


async def test_a_dropped_partition_sends_nothing_of_its_sessions() -> None:
    producer = RecordingProducer()
    table = ChangelogTable(producer, "changelog", MemoryBroker())
    table.put(b"a", state("a", 2, 0, 10))
    table.put(b"b", state("b", 2, 1, 10))
    table.drop([0])
    await table.flush()
    assert [k for _, k, _, _ in producer.sent] == [b"b"]
    assert table.get(b"a") is None
