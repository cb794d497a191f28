"""Hypothesis invariants of the windowing stage's pure core (SPEC B2, B4).

For any interleaving of sessions, duplicate and delayed deliveries, lost
seqs, and ticks: snapshots are contiguous, complete and disjoint, and a
crashed-and-restarted run (state ahead of the committed offset, records read
again) yields exactly the snapshots of an uninterrupted run — which is also
what a replay from offset 0 yields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import encode
from mongomem.models import SessionKey, Snapshot, Turn, Watermark
from mongomem.settings import WindowingSettings
from mongomem.stages.windowing.logic import WindowPolicy, advance, initial_state
from mongomem.stages.windowing.windower import DictWindowStore, Policies, SnapshotWindower

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDLE = 10  # seconds
MAX = 4
POLICY = WindowPolicy.of(MAX, IDLE)
SESSIONS = [SessionKey(project_id="p", user_id="u", session_id=f"s{i}") for i in range(3)]


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


@dataclass(frozen=True)
class Log:
    """Arrival-ordered events; ``delayed`` says whether arrival order differs from seq order."""

    events: tuple[Turn | Watermark, ...]
    written: dict[SessionKey, frozenset[int]]
    delayed: bool


@st.composite
def logs(draw: st.DrawFn) -> Log:
    arrivals: list[tuple[int, int, Turn | Watermark]] = []
    written: dict[SessionKey, frozenset[int]] = {}
    delayed = False
    for session in SESSIONS[: draw(st.integers(1, 3))]:
        count = draw(st.integers(1, 14))
        steps = draw(st.lists(st.integers(0, 3 * IDLE), min_size=count, max_size=count))
        lost = draw(st.sets(st.integers(1, count), max_size=min(2, count - 1)))
        second = 0
        seqs = []
        for seq, step in enumerate(steps, start=1):
            second += step
            if seq in lost:
                continue
            seqs.append(seq)
            turn = make_turn(session, seq, second)
            delay = draw(st.sampled_from([0, 0, 0, 0, 1, 5, 2 * IDLE]))
            delayed = delayed or delay > 0
            arrivals.append((second + delay, draw(st.integers(0, 9)), turn))
            if draw(st.integers(0, 5)) == 0:  # a duplicate delivery, some time later
                arrivals.append((second + draw(st.integers(0, 3 * IDLE)), 9, turn))
        written[session] = frozenset(seqs)
    horizon = max(a[0] for a in arrivals)
    for second in draw(st.lists(st.integers(0, horizon + IDLE), max_size=12)):
        arrivals.append(
            (
                second,
                draw(st.integers(0, 9)),
                Watermark(caught_up=True, at=T0 + timedelta(seconds=second)),
            )
        )
    arrivals.sort(key=lambda a: (a[0], a[1]))
    final = Watermark(caught_up=True, at=T0 + timedelta(seconds=horizon + 10 * IDLE))
    return Log((*(a[2] for a in arrivals), final), written, delayed)


def run_pure(log: Log, session: SessionKey) -> tuple[list[Snapshot], set[int], set[int]]:
    state = initial_state(session)
    snapshots: list[Snapshot] = []
    late: set[int] = set()
    lost: set[int] = set()
    for event in log.events:
        if isinstance(event, Turn) and event.session != session:
            continue
        result = advance(state, event, POLICY)
        state = result.state
        assert len(state.open) < MAX, "a window closes as soon as it is full"
        if state.ahead:
            assert state.ahead[0].seq > state.expected, "waiting turns sit past a hole"
        snapshots.extend(result.snapshots)
        late.update(result.late)
        lost.update(result.lost)
    assert not state.pending, "the final tick must close everything"
    return snapshots, late, lost


@settings(max_examples=300, deadline=None)
@given(logs())
def test_snapshots_are_contiguous_complete_and_disjoint(log: Log) -> None:
    for session, written in log.written.items():
        snapshots, late, lost = run_pure(log, session)
        promoted: list[int] = []
        for snap in snapshots:
            seqs = [t.seq for t in snap.turns]
            assert seqs == list(range(snap.first_seq, snap.last_seq + 1)), "contiguous"
            assert len(seqs) <= MAX
            if snap.reason == "count":
                assert len(seqs) == MAX
            assert all(
                t.turn_id == Turn.make_id("p", "u", session.session_id, t.seq) for t in snap.turns
            )
            promoted.extend(seqs)
        assert promoted == sorted(set(promoted)), "disjoint and in order"
        assert set(promoted) | late == written, "every delivered turn is promoted or reported late"
        assert (late - set(promoted)) <= lost, "a turn is only left out after its seq was given up"
        assert not (lost & set(promoted))
        if not log.delayed and written == set(range(1, max(written) + 1)):
            assert not lost
            assert promoted == sorted(written), "nothing lost → everything promoted, in order"


@settings(max_examples=200, deadline=None)
@given(logs())
def test_idle_gap_between_turns_closes_the_window(log: Log) -> None:
    if log.delayed:
        return
    for session in log.written:
        snapshots, _, _ = run_pure(log, session)
        for snap in snapshots:
            for before, after in zip(snap.turns, snap.turns[1:], strict=False):
                assert after.created_at - before.created_at < POLICY.idle_timeout


# --- the windower over records: live == replay == crash + restart ------------------------


class RecordingSink:
    def __init__(self) -> None:
        self.delivered: list[Snapshot] = []

    async def deliver(self, snapshot: Snapshot) -> None:
        self.delivered.append(snapshot)


class NoDeadLetters:
    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        raise AssertionError(f"unexpected dead letter: {letter.error}")


Record = tuple[int, int, bytes]  # partition, offset, value


def records(log: Log, partitions: int = 2) -> list[Record]:
    """The log as Kafka would hold it: turns in their session's partition, ticks in every one."""
    offsets = [0] * partitions
    out: list[Record] = []
    for event in log.events:
        if isinstance(event, Turn):
            targets = [int(event.session_id[1:]) % partitions]
        else:
            targets = list(range(partitions))
        for p in targets:
            out.append((p, offsets[p], encode(event)))
            offsets[p] += 1
    return out


def windower(store: DictWindowStore, sink: RecordingSink) -> SnapshotWindower:
    defaults = WindowingSettings(max_messages=MAX, idle_timeout_s=IDLE)
    return SnapshotWindower(
        store=store,
        sink=sink,
        policies=Policies(defaults),
        dead_letters=NoDeadLetters(),
        topic="turns",
    )


async def feed(w: SnapshotWindower, recs: list[Record]) -> None:
    for partition, offset, value in recs:
        await w.process(partition, offset, None, value)


def distinct(snapshots: list[Snapshot]) -> list[Snapshot]:
    seen: dict[str, Snapshot] = {}
    for snap in snapshots:
        if snap.snapshot_id in seen:
            assert seen[snap.snapshot_id] == snap, "a redelivered snapshot must be identical"
        seen.setdefault(snap.snapshot_id, snap)
    return list(seen.values())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=logs(), data=st.data())
def test_crash_restart_and_replay_yield_the_live_snapshots(log: Log, data: st.DataObject) -> None:
    recs = records(log)

    async def scenario() -> None:
        live_sink = RecordingSink()
        await feed(windower(DictWindowStore(), live_sink), recs)
        live = live_sink.delivered
        assert len(distinct(live)) == len(live), "an uninterrupted run delivers each snapshot once"
        by_session = {
            s.session_id: [x for x in live if x.session_id == s.session_id] for s in log.written
        }
        for session in log.written:
            assert by_session[session.session_id] == run_pure(log, session)[0]

        # replay from offset 0 in a new group: fresh state, same records
        replay_sink = RecordingSink()
        await feed(windower(DictWindowStore(), replay_sink), recs)
        assert replay_sink.delivered == live

        # crash after `crash_at` records; the table's changelog got further than the
        # committed offsets, which fall anywhere at or before it, per partition
        crash_at = data.draw(st.integers(0, len(recs)), label="crash_at")
        sink = RecordingSink()
        store = DictWindowStore()
        await feed(windower(store, sink), recs[:crash_at])
        committed = {}
        for p in {r[0] for r in recs}:
            done = [r[1] for r in recs[:crash_at] if r[0] == p]
            committed[p] = data.draw(st.integers(0, len(done)), label=f"committed[{p}]")
        restarted = windower(store, sink)  # the store survives (changelog); the index does not
        await feed(restarted, [r for r in recs if r[1] >= committed[r[0]]])
        assert distinct(sink.delivered) == distinct(live)

    asyncio.run(scenario())


def _run(events: list[Turn | Watermark]) -> list[tuple[int, int, str]]:
    state = initial_state(SESSIONS[0])
    out: list[tuple[int, int, str]] = []
    for event in events:
        result = advance(state, event, POLICY)
        state = result.state
        out.extend((s.first_seq, s.last_seq, s.reason) for s in result.snapshots)
    return out


@given(
    gaps=st.lists(st.integers(0, 3 * IDLE), min_size=1, max_size=12),
    ticks=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_a_historical_import_windows_by_its_own_times_whatever_the_watermarks(
    gaps: list[int], ticks: list[bool]
) -> None:
    """SPEC J7: turns recorded with their own (old) times, arriving a second apart now,
    split only where their own pauses reach the idle timeout — watermarks of the change
    stream (far past those times) that come mid-import change nothing — and the last
    window closes at a watermark once the import has been quiet for the idle timeout."""
    old = T0 - timedelta(days=365)
    now = T0
    own, second = [], 0
    for seq, gap in enumerate(gaps, start=1):
        second += gap
        turn = make_turn(SESSIONS[0], seq, 0).model_copy(
            update={
                "created_at": old + timedelta(seconds=second),
                "recorded_at": now + timedelta(seconds=seq),
            }
        )
        own.append(turn)
    with_ticks: list[Turn | Watermark] = []
    for turn, tick in zip(own, ticks, strict=False):
        with_ticks.append(turn)
        if tick:  # a watermark of the stream, just after this turn arrived
            assert turn.recorded_at is not None
            at = turn.recorded_at + timedelta(milliseconds=500)
            with_ticks.append(Watermark(at=at, caught_up=True))
    end = Watermark(at=now + timedelta(seconds=len(own) + IDLE), caught_up=True)
    expected = []  # by own times: a pause of IDLE or more, or MAX turns, closes a window
    start = 1
    for i in range(1, len(own) + 1):
        if i < len(own) and gaps[i] >= IDLE:
            while i - start + 1 > MAX:
                expected.append((start, start + MAX - 1, "count"))
                start += MAX
            expected.append((start, i, "idle" if i - start + 1 < MAX else "count"))
            start = i + 1
    while len(own) - start + 1 >= MAX:
        expected.append((start, start + MAX - 1, "count"))
        start += MAX
    if start <= len(own):
        expected.append((start, len(own), "idle"))
    assert _run([*own, end]) == _run([*with_ticks, end])
    assert [(a, b) for a, b, _ in _run([*with_ticks, end])] == [(a, b) for a, b, _ in expected]
