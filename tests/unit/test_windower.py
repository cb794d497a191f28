"""The windower core without servers: positions, gaps, failures, per-project policy."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import decode, encode, peek_kind
from mongomem.errors import StorageError
from mongomem.models import SessionKey, Snapshot, Turn, Watermark
from mongomem.project_config import WindowingConfig, WindowOverride
from mongomem.settings import WindowingSettings
from mongomem.stages.windowing import WindowPolicy, advance
from mongomem.stages.windowing.logic import initial_state
from mongomem.stages.windowing.windower import DictWindowStore, Policies, SnapshotWindower

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SESSION = SessionKey(project_id="p", user_id="u", session_id="s")


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


def watermark(second: float) -> Watermark:
    return Watermark(caught_up=True, at=T0 + timedelta(seconds=second))


class Sink:
    def __init__(self, failures: list[Exception] | None = None) -> None:
        self.delivered: list[Snapshot] = []
        self.failures = failures or []

    async def deliver(self, snapshot: Snapshot) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.delivered.append(snapshot)


class Letters:
    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        self.sent.append(letter)


def make(
    sink: Sink,
    letters: Letters | None = None,
    store: DictWindowStore | None = None,
    **policy: float,
) -> SnapshotWindower:
    defaults = WindowingSettings(
        max_messages=int(policy.get("max_messages", 3)), idle_timeout_s=policy.get("idle", 10)
    )
    return SnapshotWindower(
        store=store or DictWindowStore(),
        sink=sink,
        policies=Policies(defaults),
        dead_letters=letters or Letters(),
        topic="turns",
        backoff_s=0,
    )


def spans(snapshots: list[Snapshot]) -> list[tuple[int, int, str]]:
    return [(s.first_seq, s.last_seq, s.reason) for s in snapshots]


def test_a_gap_waits_then_closes_with_what_is_there() -> None:
    policy = WindowPolicy.of(10, 10)
    state = initial_state(SESSION)
    closed: list[Snapshot] = []
    for event in [turn(1, 0), turn(2, 1), turn(4, 2), turn(5, 3), turn(6, 11.9)]:
        result = advance(state, event, policy)
        state, closed = result.state, closed + list(result.snapshots)
        assert not result.lost
    assert closed == [], "still waiting for seq 3 (the hole was seen at t=2)"
    result = advance(state, turn(7, 12), policy)
    assert result.lost == (3,)
    assert spans(list(result.snapshots)) == [(1, 2, "gap")]
    assert [t.seq for t in result.state.open] == [4, 5, 6, 7]
    late = advance(result.state, turn(3, 0.5), policy)
    assert late.late == (3,)
    assert late.state == result.state, "a lost seq arriving later is ignored"


def test_a_hole_does_not_block_an_idle_close() -> None:
    policy = WindowPolicy.of(10, 10)
    state = initial_state(SESSION)
    for event in [turn(1, 0), turn(3, 1)]:
        state = advance(state, event, policy).state
    result = advance(state, watermark(11), policy)
    assert spans(list(result.snapshots)) == [(1, 1, "gap"), (3, 3, "idle")]
    assert result.lost == (2,)
    assert not result.state.pending
    assert result.state.next_seq == 4


async def test_a_replayed_watermark_is_not_applied_to_a_state_that_is_ahead_of_it() -> None:
    # A turn later than the watcher's lateness: the watermark at t=20 sits in the log
    # before turn 2 (created t=5), which then starts a window of its own.
    log = [turn(1, 0), watermark(20), turn(2, 5), turn(3, 6), turn(4, 7), watermark(100)]
    records = [(0, offset, encode(event)) for offset, event in enumerate(log)]
    live = Sink()
    w = make(live, max_messages=10)
    for p, o, v in records:
        await w.process(p, o, None, v)
    assert spans(live.delivered) == [(1, 1, "idle"), (2, 4, "idle")]

    crashed, store = Sink(), DictWindowStore()
    first = make(crashed, store=store, max_messages=10)
    for p, o, v in records[:5]:
        await first.process(p, o, None, v)
    restarted = make(crashed, store=store, max_messages=10)  # committed offset was 1
    for p, o, v in records[1:]:
        await restarted.process(p, o, None, v)
    assert crashed.delivered == live.delivered
    assert restarted.stats.redelivered == 4


async def test_poison_messages_go_to_the_dead_letter_topic_and_the_stream_goes_on() -> None:
    sink, letters = Sink(), Letters()
    w = make(sink, letters)
    await w.process(1, 7, b"k", b"not json")
    await w.process(
        1, 8, b"k", encode(Watermark(caught_up=True, at=T0)).replace(b"watermark", b"mystery")
    )
    await w.process(1, 9, None, None)
    await w.process(1, 10, b"another session", encode(turn(1, 0)))
    await w.process(1, 11, SESSION.kafka_key(), encode(turn(1, 0)))
    assert [(d.source_offset, d.error_class, d.attempts) for d in letters.sent] == [
        (7, "MessageDecodeError", 1),
        (8, "MessageDecodeError", 1),
        (9, "MessageDecodeError", 1),
        (10, "MessageDecodeError", 1),
    ]
    assert letters.sent[0].original_value() == b"not json"
    assert w.stats.turns == 1


async def test_retriable_failures_are_retried_then_stop_the_stage() -> None:
    sink = Sink([StorageError("down")] * 2)
    w = make(sink, max_messages=1)
    await w.process(0, 0, None, encode(turn(1, 0)))
    assert spans(sink.delivered) == [(1, 1, "count")]

    stuck = make(Sink([StorageError("down")] * 10), max_messages=1)
    with pytest.raises(StorageError):
        await stuck.process(0, 0, None, encode(turn(1, 0)))
    assert stuck.store.get(SESSION.kafka_key()) is None, "no state written for an unfinished record"


async def test_unexpected_errors_are_retried_then_dead_lettered() -> None:
    letters = Letters()
    w = make(Sink([RuntimeError("bug")] * 10), letters, max_messages=1)
    await w.process(0, 3, None, encode(turn(1, 0)))
    assert [(d.error_class, d.attempts) for d in letters.sent] == [("RuntimeError", 4)]


async def test_watermarks_reach_only_the_open_sessions_of_their_partition() -> None:
    other = SessionKey(project_id="p", user_id="u", session_id="other")
    sink = Sink()
    w = make(sink)
    await w.process(0, 0, None, encode(turn(1, 0)))
    await w.process(1, 0, None, encode(turn(1, 0, other)))
    await w.process(1, 1, None, encode(watermark(30)))
    assert [s.session_id for s in sink.delivered] == ["other"]
    w.invalidate_index()  # as after a rebalance: rebuilt from the store
    await w.process(0, 1, None, encode(watermark(30)))
    assert [s.session_id for s in sink.delivered] == ["other", "s"]


def test_project_overrides_win_over_the_defaults() -> None:
    config = WindowingConfig(
        max_messages=8, projects={"support": WindowOverride(idle_timeout_s=30)}
    )
    settings = WindowingSettings(max_messages=20, idle_timeout_s=300, state_ttl_s=None)
    policies = Policies(settings, config)
    assert policies.for_project("support") == WindowPolicy.of(8, 30)
    assert policies.for_project("other") == WindowPolicy.of(8, 300)
    week = 7 * 24 * 3600.0
    assert Policies(WindowingSettings()).for_project("x") == WindowPolicy.of(20, 300, week)


@pytest.mark.parametrize(
    "name",
    [
        "mongomem.stages.windowing",
        "mongomem.stages.windowing.logic",
        "mongomem.stages.windowing.windower",
        "mongomem.stages.windowing.sinks",
        "mongomem.stages.windowing.app",
        "mongomem.stages.windowing.consumer",
        "mongomem.stages.windowing.worker",
        "mongomem.stages.windowing.ports",
        "mongomem.stages.windowing.reader",
        "mongomem.stages.windowing.batches",
    ],
)
def test_exports_are_sorted_and_resolve(name: str) -> None:
    module = importlib.import_module(name)

    def ruff_order(symbol: str) -> tuple[int, str]:  # RUF022: CONSTANTS, Classes, functions
        return (0 if symbol.isupper() else 1 if symbol[0].isupper() else 2), symbol

    assert list(module.__all__) == sorted(module.__all__, key=ruff_order)
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"


def test_watermarks_have_their_own_message_kind() -> None:
    raw = encode(watermark(1))
    assert peek_kind(raw) == "watermark"
    assert decode(raw, Watermark) == watermark(1)


async def test_a_window_tick_of_an_older_version_closes_nothing_and_is_no_poison() -> None:
    # Windowing workers once produced these with their own clock, which proves nothing.
    sink, letters = Sink(), Letters()
    w = make(sink, letters)
    legacy = b'{"kind":"window-tick","v":1,"data":{"at":"2026-06-01T00:00:00Z"}}'
    await w.process(0, 0, None, encode(turn(1, 0)))
    await w.process(0, 1, None, legacy)
    await w.process_batch(0, [(2, None, legacy)])
    assert sink.delivered == []
    assert letters.sent == []
    assert w.stats.ignored_ticks == 2
    await w.process(0, 3, None, encode(watermark(10)))
    assert spans(sink.delivered) == [(1, 1, "idle")]
