"""Hypothesis: applying records in batches is applying them one by one (SPEC B2, B4).

``SnapshotWindower.process_batch`` runs the logic over a whole batch, delivers
the snapshots concurrently and writes each changed session's final state once.
For any records (turns of several sessions, in or out of order, duplicated,
with holes, ticks, poison messages), cut into any batches, and with a crash
and restart anywhere, it must leave the same store (states and position
stamps), deliver the same snapshots (each session's in the same order) and
dead-letter the same records as :meth:`process` record by record — whether
the sink delivers one snapshot at a time or many at once. A delivery
that fails inside a batch must leave nothing of the batch written.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import encode
from mongomem.errors import StorageError
from mongomem.models import SessionKey, Snapshot, Turn, Watermark
from mongomem.settings import WindowingSettings
from mongomem.stages.windowing.batches import BatchPipeline
from mongomem.stages.windowing.windower import DictWindowStore, Policies, Record, SnapshotWindower

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDLE = 10
MAX = 3
SESSIONS = [SessionKey(project_id="p", user_id="u", session_id=f"s{i}") for i in range(4)]
POISON = [b"not json", b'{"kind":"mystery","v":1,"data":{}}', None]


def make_turn(session: SessionKey, seq: int, second: int) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user",
        content=f"{session.session_id}#{seq}",
        created_at=T0 + timedelta(seconds=second),
    )


@st.composite
def partition_logs(draw: st.DrawFn) -> list[Record]:
    """One partition's records: turns (any order, repeats, holes), ticks and poison."""
    out: list[Record] = []
    for offset in range(draw(st.integers(1, 60))):
        choice = draw(st.integers(0, 9))
        second = draw(st.integers(0, 6 * IDLE))
        if choice < 7:
            session = draw(st.sampled_from(SESSIONS))
            seq = draw(st.integers(1, 9))
            keyed = draw(st.booleans())
            value = encode(make_turn(session, seq, second))
            out.append((offset, session.kafka_key() if keyed else None, value))
        elif choice < 9:
            out.append(
                (offset, None, encode(Watermark(caught_up=True, at=T0 + timedelta(seconds=second))))
            )
        else:
            out.append((offset, b"k", draw(st.sampled_from(POISON))))
    return out


TTL = 3 * IDLE


@st.composite
def conversations(draw: st.DrawFn) -> list[Record]:
    """Sessions that talk in bursts with pauses longer than the TTL, ticks all along.

    Deliveries are late, reordered or repeated by less than the idle timeout —
    well within the TTL, as the stage assumes (a session is never retired
    while a turn of it is still on its way).
    """
    arrivals: list[tuple[float, int, bytes | None, bytes]] = []
    horizon = 0
    for session in SESSIONS[: draw(st.integers(1, 4))]:
        second, seq = 0, 0
        for _ in range(draw(st.integers(1, 3))):
            second += draw(st.sampled_from([0, IDLE // 2, 2 * TTL]))
            for _ in range(draw(st.integers(1, 2 * MAX))):
                seq += 1
                second += draw(st.integers(0, 3))
                value = encode(make_turn(session, seq, second))
                for _ in range(1 + (draw(st.integers(0, 5)) == 0)):  # sometimes twice
                    late = draw(st.integers(0, IDLE // 2 - 1))
                    arrivals.append((second + late, 0, session.kafka_key(), value))
        horizon = max(horizon, second)
    step = draw(st.integers(1, IDLE // 2))
    for at in range(0, horizon + 2 * TTL, step):
        arrivals.append(
            (at + 0.5, 1, None, encode(Watermark(caught_up=True, at=T0 + timedelta(seconds=at))))
        )
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return [(offset, key, value) for offset, (_, _, key, value) in enumerate(arrivals)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=conversations())
def test_retiring_sessions_changes_no_snapshot(records: list[Record]) -> None:
    """Retired after the TTL and resumed from their last snapshot: the same snapshots."""

    async def scenario() -> None:
        _, forever, _, kept = await one_by_one(records)
        _, retiring, _, w = await one_by_one(records, ttl=TTL)
        assert retiring.delivered == forever.delivered
        assert kept.stats.retired == 0
        assert w.stats.resumed <= w.stats.retired
        assert w.stats.lost == kept.stats.lost == 0

    asyncio.run(scenario())


@st.composite
def cuts(draw: st.DrawFn, records: list[Record]) -> list[list[Record]]:
    """``records`` cut into consecutive non-empty batches."""
    points = sorted(draw(st.sets(st.integers(1, max(1, len(records) - 1)), max_size=6)))
    bounds = [0, *(p for p in points if p < len(records)), len(records)]
    return [records[a:b] for a, b in itertools.pairwise(bounds) if a < b]


class RecordingSink:
    def __init__(self, failures: int = 0) -> None:
        self.delivered: list[Snapshot] = []
        self.failures = failures

    async def deliver(self, snapshot: Snapshot) -> None:
        await asyncio.sleep(0)  # let concurrent deliveries interleave
        if self.failures:
            self.failures -= 1
            raise StorageError("down for a moment")
        self.delivered.append(snapshot)


class BulkRecordingSink(RecordingSink):
    """A sink with ``deliver_many`` (as the real publisher has): the windower uses it."""

    async def deliver_many(self, snapshots: Sequence[Snapshot]) -> None:
        await asyncio.sleep(0)
        if self.failures:
            self.failures -= 1
            self.delivered.extend(snapshots[: len(snapshots) // 2])  # partly delivered
            raise StorageError("down for a moment")
        self.delivered.extend(snapshots)


class Letters:
    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        self.sent.append(letter)


class Resume:
    """Where unknown sessions resume, as MongoDB would say: from the sink's snapshots."""

    def __init__(self, sink: RecordingSink) -> None:
        self.sink = sink

    async def last_promoted(self, sessions: Collection[SessionKey]) -> dict[SessionKey, int]:
        await asyncio.sleep(0)
        return {
            session: max(
                (s.last_seq for s in self.sink.delivered if s.session == session), default=0
            )
            for session in sessions
        }


def windower(
    store: DictWindowStore, sink: RecordingSink, letters: Letters, ttl: float | None = None
) -> SnapshotWindower:
    """A windower; with ``ttl``, sessions are retired and resume through :class:`Resume`."""
    settings = WindowingSettings(max_messages=MAX, idle_timeout_s=IDLE, state_ttl_s=ttl)
    return SnapshotWindower(
        store=store,
        sink=sink,
        policies=Policies(settings),
        dead_letters=letters,
        topic="turns",
        backoff_s=0,
        resume=Resume(sink) if ttl is not None else None,
    )


def per_session(snapshots: list[Snapshot]) -> dict[str, list[Snapshot]]:
    out: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        out.setdefault(snap.session_id, []).append(snap)
    return out


async def one_by_one(
    records: list[Record],
    store: DictWindowStore | None = None,
    partition: int = 0,
    ttl: float | None = None,
) -> tuple[DictWindowStore, RecordingSink, Letters, SnapshotWindower]:
    store, sink, letters = store or DictWindowStore(), RecordingSink(), Letters()
    w = windower(store, sink, letters, ttl)
    for offset, key, value in records:
        await w.process(partition, offset, key, value)
    return store, sink, letters, w


def distinct(snapshots: list[Snapshot]) -> list[Snapshot]:
    """Each snapshot once, where it first came; a repeat must be identical."""
    seen: dict[str, Snapshot] = {}
    for snap in snapshots:
        assert seen.setdefault(snap.snapshot_id, snap) == snap
    return list(seen.values())


def letters_of(letters: Letters) -> list[tuple[int, str]]:
    return [(d.source_offset, d.error_class) for d in letters.sent]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_batches_leave_what_records_one_by_one_leave(data: st.DataObject) -> None:
    """Batch after batch, or pipelined: batch N+1 planned while N is delivered.

    With a state TTL (and conversations that pause for longer), sessions are also
    retired at ticks and resumed when they speak again.
    """
    ttl = data.draw(st.sampled_from([None, TTL]), label="ttl")
    records = data.draw(partition_logs() if ttl is None else conversations(), label="records")
    batches = data.draw(cuts(records), label="batches")
    failures = data.draw(st.integers(0, 3), label="failures")
    bulk = data.draw(st.booleans(), label="bulk")
    pipelined = data.draw(st.booleans(), label="pipelined")

    async def scenario() -> None:
        expected_store, expected_sink, expected_letters, expected = await one_by_one(
            records, ttl=ttl
        )

        sink = BulkRecordingSink(failures) if bulk else RecordingSink(failures)
        store, letters = DictWindowStore(), Letters()
        w = windower(store, sink, letters, ttl)
        if pipelined:
            done: list[int] = []
            pipeline = BatchPipeline(w, 0, on_done=lambda batch: done.append(batch[-1][0]))
            for batch in batches:
                await pipeline.submit(batch)
                assert pipeline.in_flight <= 2
            await pipeline.drain()
            assert done == [batch[-1][0] for batch in batches], "each batch reported, in order"
        else:
            for batch in batches:
                await w.process_batch(0, batch)

        assert store.data == expected_store.data, "same states, same position stamps"
        # A failed batch is applied again record by record: its snapshots may come twice.
        assert per_session(distinct(sink.delivered)) == per_session(expected_sink.delivered)
        if not failures:
            assert sink.delivered == distinct(sink.delivered), "each delivered once"
        assert w.stats == expected.stats
        assert letters_of(letters) == letters_of(expected_letters)

    asyncio.run(scenario())


async def test_a_batch_planned_after_one_that_fell_back_is_planned_again() -> None:
    """The batch before dead-letters a record its plan applied: the next is planned anew."""

    class PoisonOnce(RecordingSink):
        """Cannot deliver the first window's snapshot, ever: its closing turn is dead-lettered."""

        async def deliver(self, snapshot: Snapshot) -> None:
            if snapshot.first_seq == 1:
                raise ValueError("this snapshot cannot be stored")  # not retriable: dead-lettered
            await super().deliver(snapshot)

    session = SESSIONS[0]
    turns = [
        (offset, session.kafka_key(), encode(make_turn(session, offset + 1, 0)))
        for offset in range(2 * MAX)
    ]
    sink, letters = PoisonOnce(), Letters()
    store = DictWindowStore()
    w = windower(store, sink, letters)
    pipeline = BatchPipeline(w, 0)
    await pipeline.submit(turns[:MAX])  # closes seqs 1..MAX: delivery fails, record 3 is dead
    await pipeline.submit(turns[MAX:])  # planned on the first plan's windows
    await pipeline.drain()

    expected_store, expected_sink, expected_letters = DictWindowStore(), PoisonOnce(), Letters()
    one = windower(expected_store, expected_sink, expected_letters)
    for turn in turns:
        await one.process(0, *turn)
    assert letters_of(letters) == letters_of(expected_letters) == [(MAX - 1, "ValueError")]
    assert sink.delivered == expected_sink.delivered
    assert store.data == expected_store.data
    # Planned on the first plan (next seq MAX+1), the second batch would have closed a window;
    # planned again on what the fallback left (seq MAX dead), its turns wait past a hole.
    state = store.get(session.kafka_key())
    assert state is not None
    assert [t.seq for t in state.ahead] == list(range(MAX + 1, 2 * MAX + 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_restart_in_batches_yields_the_live_snapshots(data: st.DataObject) -> None:
    records = data.draw(partition_logs(), label="records")
    crash_at = data.draw(st.integers(0, len(records)), label="crash_at")
    committed = data.draw(st.integers(0, crash_at), label="committed")

    async def scenario() -> None:
        _, live, _, _ = await one_by_one(records)

        store, sink, letters = DictWindowStore(), RecordingSink(), Letters()
        first = windower(store, sink, letters)
        for batch in data.draw(cuts(records[:crash_at]), label="before") if crash_at else []:
            await first.process_batch(0, batch)
        restarted = windower(store, sink, letters)  # the store survives; the index does not
        rest = records[committed:]
        for batch in data.draw(cuts(rest), label="after") if rest else []:
            await restarted.process_batch(0, batch)

        distinct = {s.snapshot_id: s for s in sink.delivered}
        assert sorted(distinct) == sorted({s.snapshot_id for s in live.delivered})
        for snap in live.delivered:
            assert distinct[snap.snapshot_id] == snap, "the same snapshot, whenever delivered"

    asyncio.run(scenario())


async def test_a_batch_that_cannot_be_delivered_writes_nothing_and_raises() -> None:
    session = SESSIONS[0]
    records: list[Record] = [
        (offset, None, encode(make_turn(session, offset + 1, offset))) for offset in range(3)
    ]
    store = DictWindowStore()
    w = windower(store, RecordingSink(failures=100), Letters())
    with pytest.raises(StorageError):
        await w.process_batch(0, records)
    # The record before the failing one (max_messages=3: the third closes a window) was
    # applied on its own by the record-by-record fallback; the failing one was not.
    state = store.get(session.kafka_key())
    assert state is not None
    assert state.offset == 1
    assert [t.seq for t in state.open] == [1, 2]


async def test_many_sessions_close_in_one_batch_and_each_state_is_written_once() -> None:
    class CountingStore(DictWindowStore):
        puts = 0

        def put(self, key: bytes, state: object) -> None:
            CountingStore.puts += 1
            super().put(key, state)  # type: ignore[arg-type]

    records: list[Record] = []
    for seq in range(1, MAX + 1):
        for session in SESSIONS:
            records.append((len(records), session.kafka_key(), encode(make_turn(session, seq, 0))))
    store, sink = CountingStore(), RecordingSink()
    w = windower(store, sink, Letters())
    await w.process_batch(0, records)
    assert sorted(s.session_id for s in sink.delivered) == sorted(s.session_id for s in SESSIONS)
    assert CountingStore.puts == len(SESSIONS)
    assert w.stats.turns == len(records)
    assert w.stats.snapshots == len(SESSIONS)


async def test_a_pipeline_raises_the_failure_of_a_batch_that_finished_with_one() -> None:
    """The consumer asks between fetches: a batch that failed for good stops the stage."""
    session = SESSIONS[0]
    records: list[Record] = [
        (offset, None, encode(make_turn(session, offset + 1, offset))) for offset in range(MAX)
    ]
    pipeline = BatchPipeline(windower(DictWindowStore(), RecordingSink(failures=100), Letters()), 0)
    await pipeline.submit(records)
    pipeline.raise_failure()  # still in flight: nothing to raise yet
    for _ in range(100):
        await asyncio.sleep(0)
    with pytest.raises(StorageError):
        pipeline.raise_failure()
    with pytest.raises(StorageError):
        await pipeline.drain()
