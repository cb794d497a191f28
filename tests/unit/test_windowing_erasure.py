"""The windowing stage and the erasure register (SPEC J3): an erased session's turns and
ends are dropped with its window state, batch or record by record; others are untouched."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from mongomem.codec import encode
from mongomem.models import SessionKey, Watermark
from mongomem.stages.windowing.windower import DictWindowStore, Record
from tests.property.test_windowing_batches import (
    SESSIONS,
    T0,
    BulkRecordingSink,
    Letters,
    make_turn,
    windower,
)

GONE, KEPT = SESSIONS[0], SESSIONS[1]


class Register:
    def __init__(self) -> None:
        self.erased: set[SessionKey] = set()

    async def erased_among(self, sessions: Iterable[SessionKey]) -> set[SessionKey]:
        return {s for s in sessions if s in self.erased}


def turns(session: SessionKey, seqs: range, offset: int) -> list[Record]:
    return [
        (offset + i, session.kafka_key(), encode(make_turn(session, seq, seq)))
        for i, seq in enumerate(seqs)
    ]


async def test_an_erased_sessions_turns_leave_no_state_and_no_snapshot() -> None:
    store, sink, register = DictWindowStore(), BulkRecordingSink(), Register()
    w = windower(store, sink, Letters())
    w.erasures = register
    await w.process_batch(0, turns(GONE, range(1, 3), 0) + turns(KEPT, range(1, 3), 2))
    assert store.get(GONE.kafka_key()) is not None  # not erased yet: windowed as usual

    register.erased.add(GONE)
    # a replay of the erased session's turns (and more of them), beside live ones
    await w.process_batch(0, turns(GONE, range(1, 12), 4) + turns(KEPT, range(3, 5), 15))
    for offset, key, value in turns(GONE, range(12, 14), 17):  # record by record too
        await w.process(0, offset, key, value)
    tick = encode(Watermark(caught_up=True, at=T0 + timedelta(hours=1)))
    await w.process_batch(0, [(19, None, tick)])

    assert store.get(GONE.kafka_key()) is None
    assert store.get(KEPT.kafka_key()) is not None
    assert {s.session for s in sink.delivered} == {KEPT}
    assert w.stats.erased == 13


async def test_an_erased_session_that_only_waits_is_dropped_at_the_next_watermark() -> None:
    """No event of its own arrives after the erasure: its idle state must not linger, nor
    close into a snapshot, when a watermark comes (batch and record by record)."""
    for by_record in (False, True):
        store, sink, register = DictWindowStore(), BulkRecordingSink(), Register()
        w = windower(store, sink, Letters())
        w.erasures = register
        await w.process_batch(0, turns(GONE, range(1, 3), 0) + turns(KEPT, range(1, 3), 2))
        assert store.get(GONE.kafka_key()) is not None  # waiting for its idle timeout

        register.erased.add(GONE)
        tick = encode(Watermark(caught_up=True, at=T0 + timedelta(hours=1)))
        if by_record:
            await w.process(0, 4, None, tick)
        else:
            await w.process_batch(0, [(4, None, tick)])

        assert store.get(GONE.kafka_key()) is None
        assert {s.session for s in sink.delivered} == {KEPT}
