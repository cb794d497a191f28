"""``end_session`` in the window logic and the windower: a session end closes the window at once.

A :class:`SessionEnd` holds a seq of its session like a turn, travels in the
turns topic, and closes the open window (reason ``end``) where it stands —
the same snapshot live, redelivered or replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import decode, encode
from mongomem.models import SessionEnd, SessionKey, Snapshot, Turn, Watermark
from mongomem.settings import WindowingSettings
from mongomem.stages.watcher_encode import TurnEncoder
from mongomem.stages.windowing import WindowPolicy, advance
from mongomem.stages.windowing.logic import initial_state
from mongomem.stages.windowing.reader import EndRecord, TurnReader
from mongomem.stages.windowing.windower import DictWindowStore, Policies, SnapshotWindower
from mongomem.stm.turns import end_document

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SESSION = SessionKey(project_id="p", user_id="u", session_id="s")
POLICY = WindowPolicy.of(10, 60)


def turn(seq: int, second: float, session: SessionKey = SESSION) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user",
        content=f"turn {seq}",
        created_at=T0 + timedelta(seconds=second),
    )


def end(seq: int, second: float, session: SessionKey = SESSION) -> SessionEnd:
    return SessionEnd(
        seq_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        created_at=T0 + timedelta(seconds=second),
    )


def spans(snapshots: list[Snapshot] | tuple[Snapshot, ...]) -> list[tuple[int, int, str]]:
    return [(s.first_seq, s.last_seq, s.reason) for s in snapshots]


def run(events: list[Turn | SessionEnd | Watermark]) -> list[Snapshot]:
    state, out = initial_state(SESSION), list[Snapshot]()
    for event in events:
        result = advance(state, event, POLICY)
        state = result.state
        out.extend(result.snapshots)
    return out


def test_an_end_closes_the_open_window_at_once_and_the_next_turn_starts_a_new_one() -> None:
    """An end closes the window where it stands, at the last turn's own time (SPEC J5)."""
    closed = run([turn(1, 0), turn(2, 1), turn(3, 2), end(4, 3), turn(5, 4), turn(6, 5)])
    assert spans(closed) == [(1, 3, "end")]
    assert closed[0].closed_at == T0 + timedelta(seconds=2), "the last turn's own time"
    later = run([turn(1, 0), end(2, 1), turn(3, 2), end(4, 3)])
    assert spans(later) == [(1, 1, "end"), (3, 3, "end")]


def test_an_end_with_nothing_open_closes_nothing_and_its_seq_is_passed_over() -> None:
    state = initial_state(SESSION)
    result = advance(state, end(1, 0), POLICY)
    assert result.snapshots == ()
    assert result.state.next_seq == 2
    result = advance(result.state, end(2, 1), POLICY)
    assert result.state.next_seq == 3
    assert spans(run([end(1, 0), turn(2, 1), end(3, 2)])) == [(2, 2, "end")]


def test_a_redelivered_end_changes_nothing() -> None:
    state = initial_state(SESSION)
    for event in (turn(1, 0), end(2, 1)):
        state = advance(state, event, POLICY).state
    again = advance(state, end(2, 1), POLICY)
    assert again.late == (2,)
    assert again.state == state
    assert again.snapshots == ()


def test_seqs_missing_before_an_end_are_given_up() -> None:
    state = initial_state(SESSION)
    for event in (turn(1, 0), turn(3, 1)):  # seq 2 never arrives (dead-lettered upstream)
        state = advance(state, event, POLICY).state
    result = advance(state, end(5, 2), POLICY)  # nor does seq 4
    assert spans(result.snapshots) == [(1, 1, "gap"), (3, 3, "end")]
    assert result.lost == (2, 4)
    assert not result.state.pending
    assert result.state.next_seq == 6


def test_an_end_is_not_a_turn_for_the_reader_and_is_keyed_by_its_session() -> None:
    raw = encode(end(4, 3))
    record = TurnReader().read(raw)
    assert isinstance(record, EndRecord)
    assert record.key == SESSION.kafka_key()
    assert record.seq == 4
    assert decode(raw, SessionEnd) == end(4, 3)
    with pytest.raises(ValueError, match="seq_id"):
        SessionEnd.model_validate({**end(4, 3).model_dump(), "seq_id": "turn_0"})


class Sink:
    def __init__(self) -> None:
        self.delivered: list[Snapshot] = []

    async def deliver(self, snapshot: Snapshot) -> None:
        self.delivered.append(snapshot)


class NoLetters:
    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        raise AssertionError(letter.error)


class Resume:
    """MongoDB's answer: snapshots so far, then the ends (in ``turns``) below the asked seq."""

    def __init__(self, sink: Sink, ends: list[SessionEnd]) -> None:
        self.sink, self.ends = sink, ends
        self.asked: list[dict[SessionKey, int]] = []

    async def last_promoted(self, sessions: Mapping[SessionKey, int]) -> dict[SessionKey, int]:
        self.asked.append(dict(sessions))
        out = {}
        for session, below in sessions.items():
            last = max((s.last_seq for s in self.sink.delivered if s.session == session), default=0)
            ends = [e.seq for e in self.ends if e.session == session and last < e.seq < below]
            out[session] = max(ends, default=last)
        return out


def windower(sink: Sink, resume: Resume | None = None) -> SnapshotWindower:
    return SnapshotWindower(
        store=DictWindowStore(),
        sink=sink,
        policies=Policies(WindowingSettings(max_messages=10, idle_timeout_s=60)),
        dead_letters=NoLetters(),
        topic="turns",
        resume=resume,
    )


async def test_the_windower_closes_on_an_end_in_a_batch_and_record_by_record_alike() -> None:
    events: list[Turn | SessionEnd] = [turn(1, 0), turn(2, 1), end(3, 2), turn(4, 3), end(5, 4)]
    records = [(offset, SESSION.kafka_key(), encode(e)) for offset, e in enumerate(events)]
    batched, single = Sink(), Sink()
    await windower(batched).process_batch(0, records)
    one = windower(single)
    for offset, key, value in records:
        await one.process(0, offset, key, value)
    assert spans(batched.delivered) == [(1, 2, "end"), (4, 4, "end")]
    assert single.delivered == batched.delivered
    assert one.stats.ends == 2


async def test_a_session_the_table_does_not_know_resumes_past_an_end() -> None:
    """A group that starts after the end (or a retired session): the next turn is no hole."""
    sink = Sink()
    resume = Resume(sink, [end(3, 2)])
    sink.delivered.append(run([turn(1, 0), turn(2, 1), end(3, 2)])[0])  # as stored before
    w = windower(sink, resume)
    await w.process_batch(0, [(0, None, encode(turn(4, 5))), (1, None, encode(end(5, 6)))])
    assert resume.asked == [{SESSION: 4}]
    assert spans(sink.delivered) == [(1, 2, "end"), (4, 4, "end")]
    assert w.stats.lost == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["turn", "end", "watermark"]), min_size=1, max_size=30))
def test_every_turn_is_in_one_snapshot_and_none_spans_an_end(kinds: list[str]) -> None:
    events: list[Turn | SessionEnd | Watermark] = []
    seq, second = 0, 0.0
    turns: list[int] = []
    ends: list[int] = []
    for kind in kinds:
        second += 1
        if kind == "watermark":
            events.append(Watermark(at=T0 + timedelta(seconds=second), caught_up=True))
            continue
        seq += 1
        events.append(turn(seq, second) if kind == "turn" else end(seq, second))
        (turns if kind == "turn" else ends).append(seq)
    events.append(Watermark(at=T0 + timedelta(seconds=second + 1000), caught_up=True))
    closed = run(events)
    promoted = [t.seq for s in closed for t in s.turns]
    assert promoted == turns, "each turn once, in order; no end is a turn"
    for snap in closed:
        assert not any(snap.first_seq <= e <= snap.last_seq for e in ends)
        if snap.reason == "end":
            assert snap.last_seq + 1 in ends
    assert run(events) == closed, "the same events: the same snapshots"


def test_the_watcher_carries_an_end_document_as_a_session_end_record() -> None:
    stored = end_document(end(4, 3))
    record = TurnEncoder().record(
        {**stored, "created_at": stored["created_at"].replace(tzinfo=None)}
    )
    assert (record.slot, record.seq) == (("p", "u", "s"), 4)
    assert record.key == SESSION.kafka_key(), "in the partition of the session's turns"
    assert decode(record.value, SessionEnd) == end(4, 3)
    assert record.created_at == end(4, 3).created_at
    with pytest.raises(ValidationError):  # another event is no turn and no end: dead-lettered
        TurnEncoder().record({**stored, "event": "pause"})


def test_an_end_after_a_historical_import_keeps_the_turns_own_time() -> None:
    """Turns of 2023 imported and ended today: the snapshot is stamped 2023 (SPEC L1)."""
    said = T0 - timedelta(days=900)
    turns = [
        turn(1, 0).model_copy(update={"created_at": said, "recorded_at": T0}),
        turn(2, 0).model_copy(
            update={"created_at": said + timedelta(seconds=9), "recorded_at": T0}
        ),
    ]
    (closed,) = run([*turns, end(3, 5)])
    assert closed.reason == "end"
    assert closed.closed_at == closed.observed_at == said + timedelta(seconds=9)
