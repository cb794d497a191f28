"""Sessions idle past their TTL leave the windowing table, and resume where they were (issue 4).

Without expiry the table would grow with every session ever seen. A session
with nothing pending and no turn for ``state_ttl_s`` (event time) is retired
at a tick; when it speaks again, the stage asks where its last snapshot
ended and starts right after it — so no "lost" seqs, no overlap.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from mongomem.adapters.kafka import DeadLetter
from mongomem.buckets import in_share
from mongomem.codec import encode
from mongomem.models import SessionKey, Snapshot, Turn, Watermark
from mongomem.settings import WindowingSettings
from mongomem.stages.windowing.logic import Window, WindowPolicy
from mongomem.stages.windowing.ports import DictWindowStore, Policies
from mongomem.stages.windowing.windower import Record, SnapshotWindower

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A = SessionKey(project_id="p", user_id="u", session_id="a")
B = SessionKey(project_id="p", user_id="u", session_id="b")
TTL = 100.0


def turn(session: SessionKey, seq: int, second: float) -> Record:
    value = Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user",
        content=f"{session.session_id}#{seq}",
        created_at=T0 + timedelta(seconds=second),
    )
    return (0, session.kafka_key(), encode(value))


def tick(second: float) -> Record:
    return (0, None, encode(Watermark(caught_up=True, at=T0 + timedelta(seconds=second))))


class Sink:
    def __init__(self) -> None:
        self.delivered: list[Snapshot] = []

    async def deliver(self, snapshot: Snapshot) -> None:
        self.delivered.append(snapshot)


class Resume:
    """What MongoDB's ``snapshots`` would answer: the sink's snapshots."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.asked: list[list[SessionKey]] = []

    async def last_promoted(self, sessions: Collection[SessionKey]) -> dict[SessionKey, int]:
        self.asked.append(list(sessions))
        return {
            session: max(
                (s.last_seq for s in self.sink.delivered if s.session == session), default=0
            )
            for session in sessions
        }


class Letters:
    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        raise AssertionError(f"nothing should be dead-lettered: {letter}")


def windower(store: DictWindowStore, sink: Sink, ttl: float | None = TTL) -> SnapshotWindower:
    settings = WindowingSettings(max_messages=3, idle_timeout_s=10, state_ttl_s=ttl)
    return SnapshotWindower(
        store=store,
        sink=sink,
        policies=Policies(settings),
        dead_letters=Letters(),
        topic="turns",
        resume=Resume(sink),
    )


NEXT_OFFSET: dict[int, int] = {}


async def feed(w: SnapshotWindower, records: list[Record]) -> None:
    """Append ``records`` to the windower's partition (offsets go on from the last feed)."""
    start = NEXT_OFFSET.get(id(w), 0)
    for offset, (_, key, value) in enumerate(records, start=start):
        await w.process(0, offset, key, value)
    NEXT_OFFSET[id(w)] = start + len(records)


def spans(snapshots: list[Snapshot]) -> list[tuple[str, int, int, str]]:
    return [(s.session_id, s.first_seq, s.last_seq, s.reason) for s in snapshots]


async def test_a_quiet_session_is_retired_and_resumes_after_its_last_snapshot() -> None:
    store, sink = DictWindowStore(), Sink()
    w = windower(store, sink)
    records = [turn(A, 1, 0), turn(A, 2, 1), turn(B, 1, 1), tick(20)]  # A's 1..2 close idle
    records += [turn(B, 2, 150), tick(160)]  # A quiet for 159 s > TTL: retired; B is not
    await feed(w, records)
    assert store.get(A.kafka_key()) is None, "A is gone from the table"
    assert store.get(B.kafka_key()) is not None
    assert w.stats.retired == 1
    await feed(w, [turn(A, 3, 200), turn(A, 4, 201), turn(A, 5, 202)])  # A comes back
    assert spans(sink.delivered) == [
        ("a", 1, 2, "idle"),
        ("b", 1, 1, "idle"),
        ("b", 2, 2, "idle"),
        ("a", 3, 5, "count"),
    ]
    assert w.stats.lost == 0, "no seq was declared lost"
    assert w.stats.resumed == 1
    state = store.get(A.kafka_key())
    assert state is not None
    assert state.next_seq == 6


async def test_retiring_changes_no_snapshot() -> None:
    records = [turn(A, 1, 0), tick(20), tick(150), turn(A, 2, 300), tick(320)]
    records += [turn(A, 3, 500), turn(A, 4, 501), turn(A, 5, 502), tick(600)]
    with_ttl, without = Sink(), Sink()
    await feed(windower(DictWindowStore(), with_ttl), records)
    await feed(windower(DictWindowStore(), without, ttl=None), records)
    assert spans(with_ttl.delivered) == spans(without.delivered)
    assert spans(without.delivered) == [
        ("a", 1, 1, "idle"),
        ("a", 2, 2, "idle"),
        ("a", 3, 5, "count"),
    ]


async def test_a_pending_or_recent_session_is_never_retired() -> None:
    store, sink = DictWindowStore(), Sink()
    w = windower(store, sink)
    # A's window is open (idle timeout not reached by event time of the ticks before 500).
    await feed(w, [turn(A, 1, 0), turn(A, 2, 1), tick(5), tick(90)])
    assert store.get(A.kafka_key()) is not None
    assert w.stats.retired == 0


async def test_a_new_session_starting_at_seq_1_asks_nothing() -> None:
    sink = Sink()
    w = windower(DictWindowStore(), sink)
    await feed(w, [turn(A, 1, 0), turn(A, 2, 1)])
    assert isinstance(w.resume, Resume)
    assert w.resume.asked == []


async def test_a_session_first_seen_mid_way_starts_after_its_last_snapshot() -> None:
    """A consumer group that starts mid-topic (or a retired session): no false gap."""
    sink = Sink()
    first = windower(DictWindowStore(), sink)
    await feed(first, [turn(A, s, s) for s in range(1, 4)])  # snapshot 1..3 exists
    late = windower(DictWindowStore(), sink)  # an empty table, the same MongoDB
    await feed(late, [turn(A, s, 10 + s) for s in range(4, 7)])
    assert spans(sink.delivered) == [("a", 1, 3, "count"), ("a", 4, 6, "count")]
    assert late.stats.lost == 0


async def test_a_turn_redelivered_long_after_is_late_not_a_new_window() -> None:
    """Past the TTL assumption: the turn is covered by a snapshot, so it is late (no overlap)."""
    sink = Sink()
    w = windower(DictWindowStore(), sink)
    await feed(w, [turn(A, s, s) for s in range(1, 7)])  # snapshots 1..3 and 4..6
    await feed(w, [tick(500), turn(A, 2, 2), tick(600)])  # A retired at 500, then seq 2 again
    assert spans(sink.delivered) == [("a", 1, 3, "count"), ("a", 4, 6, "count")]
    assert w.stats.late == 1


def test_retirable_needs_nothing_pending_and_a_turn_older_than_the_ttl() -> None:
    policy = WindowPolicy.of(3, 10, TTL)
    window = Window(A, next_seq=4, seen_at=T0)
    assert not window.retirable(T0 + timedelta(seconds=TTL - 1), policy)
    assert window.retirable(T0 + timedelta(seconds=TTL), policy)
    assert not window.retirable(T0 + timedelta(days=365), WindowPolicy.of(3, 10))  # no TTL
    assert not Window(A).retirable(T0 + timedelta(days=365), policy)  # never saw a turn


# ------------------------------------------------------------------ watcher shares


def in_share_of_two(share: int) -> SessionKey:
    """A session that share ``share`` of two watchers owns."""
    for i in range(100):
        session = SessionKey(project_id="p", user_id="u", session_id=f"share{share}-{i}")
        if in_share(session.project_id, session.user_id, session.session_id, share, 2):
            return session
    raise AssertionError("no session found in the share")


S0, S1 = in_share_of_two(0), in_share_of_two(1)


def share_tick(second: float, share: int) -> Record:
    mark = Watermark(caught_up=True, at=T0 + timedelta(seconds=second), share=share, shares=2)
    return (0, None, encode(mark))


async def test_a_watermark_retires_only_sessions_of_its_own_share() -> None:
    """Share 0's watcher is caught up, share 1's is far behind: S1 stays in the table."""
    store, sink = DictWindowStore(), Sink()
    w = windower(store, sink)
    records = [turn(S0, 1, 0), turn(S1, 1, 0), share_tick(20, 0), share_tick(20, 1)]
    records += [share_tick(500, 0)]  # only share 0's watcher got this far
    await feed(w, records)
    assert spans(sink.delivered) == [(S0.session_id, 1, 1, "idle"), (S1.session_id, 1, 1, "idle")]
    assert store.get(S0.kafka_key()) is None, "S0 outlived its TTL by share 0's watermark"
    assert store.get(S1.kafka_key()) is not None, "share 0's watermark promises nothing for S1"
    assert w.stats.retired == 1


async def test_each_share_is_scanned_on_its_own_schedule() -> None:
    """Share 0's scan at 95 (S1 not due yet) does not put off share 1's at 101 (< TTL/8 later)."""
    store, sink = DictWindowStore(), Sink()
    w = windower(store, sink)
    records = [turn(S1, 1, 0), share_tick(20, 1), share_tick(95, 0), share_tick(101, 1)]
    await feed(w, records)
    assert store.get(S1.kafka_key()) is None, "share 1's first scan retires S1"
    assert w.stats.retired == 1


async def test_share_scans_in_one_batch_match_record_by_record() -> None:
    """The batch path keeps the same per-share scan times as applying records one by one."""
    records = [turn(S0, 1, 0), turn(S1, 1, 0), share_tick(20, 0), share_tick(20, 1)]
    records += [share_tick(500, 0), share_tick(501, 1), turn(S1, 2, 600), share_tick(700, 1)]
    one_by_one, batched = DictWindowStore(), DictWindowStore()
    single, bulk = windower(one_by_one, Sink()), windower(batched, Sink())
    await feed(single, records)
    await bulk.process_batch(0, [(i, k, v) for i, (_, k, v) in enumerate(records)])
    assert batched.data == one_by_one.data
    assert bulk.stats == single.stats
