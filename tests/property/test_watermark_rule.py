"""Hypothesis: idle windows close where the turns' own times say, wherever watermarks fall.

A watermark is *sound* when every turn created before its ``at`` is ahead of
it in the log — what the watcher promises (:class:`WatermarkClock`). Then the
snapshots (ids, turns, reasons and ``closed_at``) do not depend on where the
watermarks sit or whether there are any before the end: a live run, one whose
watcher was down (no watermarks for a while) or behind (watermarks late), and
a replay all close the same windows. And the watcher's clock only ever issues
sound watermarks when turns reach the stream within its lateness.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mongomem.models import SessionKey, Snapshot, Turn, Watermark
from mongomem.stages.watcher_logic import WatermarkClock
from mongomem.stages.windowing.logic import (
    Window,
    WindowPolicy,
    advance,
    initial_state,
    snapshot_turn,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDLE = 10.0
MAX = 5
POLICY = WindowPolicy.of(MAX, IDLE)
SESSIONS = [SessionKey(project_id="p", user_id="u", session_id=f"s{i}") for i in range(3)]


def at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def make_turn(session: SessionKey, seq: int, second: float) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user",
        content=f"{session.session_id}#{seq}",
        created_at=at(second),
    )


@dataclass(frozen=True)
class Written:
    """Turns as written: each with the time its insert reached the change stream."""

    turns: tuple[tuple[float, Turn], ...]  # (inserted, turn), in insert order
    max_delay: float


@st.composite
def written(draw: st.DrawFn) -> Written:
    """Sessions written side by side; a session's next turn is created after its last insert."""
    max_delay = draw(st.sampled_from([0.0, 0.5, 2.0]))
    inserts: list[tuple[float, Turn]] = []
    for session in SESSIONS[: draw(st.integers(1, 3))]:
        created = draw(st.floats(0, 3 * IDLE))
        for seq in range(1, draw(st.integers(1, 16)) + 1):
            delay = draw(st.floats(0, max_delay))
            inserts.append((created + delay, make_turn(session, seq, created)))
            # The writer holds the session while it inserts: the next turn is created later.
            step = draw(st.one_of(st.floats(0, IDLE / 2), st.floats(IDLE / 2, 2 * IDLE)))
            created = created + delay + step
    inserts.sort(key=lambda pair: (pair[0], pair[1].session_id, pair[1].seq))
    return Written(tuple(inserts), max_delay)


def sound_log(data: st.DataObject, w: Written, lateness: float) -> list[Turn | Watermark]:
    """The turns in insert order with watermarks a caught-up or lagging watcher may publish."""
    clock = WatermarkClock(lateness=timedelta(seconds=lateness), interval_s=0)
    log: list[Turn | Watermark] = []
    for index, (inserted, turn) in enumerate(w.turns):
        log.append(turn)
        clock.read(turn.created_at)
        choice = data.draw(st.sampled_from(["none", "none", "behind", "caught-up"]))
        if choice == "none":  # the watcher is down, or published nothing here
            continue
        caught_up_at = None
        if choice == "caught-up":
            # An empty read that began after this insert and before the next one.
            following = w.turns[index + 1][0] if index + 1 < len(w.turns) else inserted + 100
            caught_up_at = at(data.draw(st.floats(inserted, max(inserted, following))))
        due = clock.due(float(index), caught_up_at)
        if due is not None:
            log.append(Watermark(at=due[0], caught_up=due[1]))
    last = max(turn.created_at for _, turn in w.turns)
    log.append(Watermark(at=last + timedelta(seconds=10 * IDLE), caught_up=True))
    return log


def run(log: list[Turn | Watermark], session: SessionKey) -> list[Snapshot]:
    state = initial_state(session)
    snapshots: list[Snapshot] = []
    for event in log:
        if isinstance(event, Turn) and event.session != session:
            continue
        result = advance(state, event, POLICY)
        state = result.state
        snapshots.extend(result.snapshots)
    assert not state.pending
    return snapshots


def by_their_times(w: Written, session: SessionKey) -> list[Snapshot]:
    """The reference: the session's turns alone, then one watermark long after the last."""
    window = Window(session)
    turns = [turn for _, turn in w.turns if turn.session == session]
    for turn in turns:
        window.on_turn(snapshot_turn(turn), POLICY)
    window.on_watermark(turns[-1].created_at + timedelta(seconds=10 * IDLE), POLICY)
    return window.snapshots


@settings(max_examples=300, deadline=None)
@given(w=written(), data=st.data())
def test_sound_watermarks_close_the_windows_the_turns_times_make(
    w: Written, data: st.DataObject
) -> None:
    log = sound_log(data, w, lateness=w.max_delay)
    for session in {turn.session for _, turn in w.turns}:
        snapshots = run(log, session)
        assert snapshots == by_their_times(w, session)
        for snap in snapshots:  # the idle rule, from the turns alone
            for before, after in zip(snap.turns, snap.turns[1:], strict=False):
                assert after.created_at - before.created_at < POLICY.idle_timeout
            if snap.reason == "idle":
                assert snap.closed_at == snap.turns[-1].created_at + POLICY.idle_timeout


@settings(max_examples=200, deadline=None)
@given(w=written(), data=st.data())
def test_two_runs_with_different_sound_watermarks_agree(w: Written, data: st.DataObject) -> None:
    """A live run and one whose watcher was down or behind elsewhere: the same snapshots."""
    first, second = sound_log(data, w, w.max_delay), sound_log(data, w, w.max_delay + 1)
    for session in {turn.session for _, turn in w.turns}:
        assert run(first, session) == run(second, session)


@settings(max_examples=300, deadline=None)
@given(w=written(), data=st.data())
def test_the_watchers_clock_issues_only_sound_watermarks(w: Written, data: st.DataObject) -> None:
    log = sound_log(data, w, lateness=w.max_delay)
    for index, event in enumerate(log):
        if isinstance(event, Watermark):
            later = [e for e in log[index + 1 :] if isinstance(e, Turn)]
            assert all(turn.created_at >= event.at for turn in later), event


def test_a_watermark_ahead_of_the_source_splits_a_window() -> None:
    """What the rule rests on: a clock that is not the source's (the old windowing ticker)."""
    session = SESSIONS[0]
    turns = [make_turn(session, seq, seq) for seq in range(1, 6)]  # 1 s apart
    ahead = Watermark(at=at(2 + IDLE), caught_up=True)  # while turns 3-5 were not yet read
    log: list[Turn | Watermark] = [
        *turns[:2],
        ahead,
        *turns[2:],
        Watermark(at=at(99), caught_up=True),
    ]
    assert [(s.first_seq, s.last_seq) for s in run(log, session)] == [(1, 2), (3, 5)]
    sound: list[Turn | Watermark] = [*turns, Watermark(at=at(99), caught_up=True)]
    assert [(s.first_seq, s.last_seq) for s in run(sound, session)] == [(1, 5)]


def test_the_clock_never_goes_back_and_waits_its_interval() -> None:
    clock = WatermarkClock(lateness=timedelta(seconds=2), interval_s=1.0)
    assert clock.due(0.0, None) is None, "nothing read and not caught up: nothing proven"
    clock.read(at(10))
    assert clock.due(0.0, None) == (at(8), False)
    clock.read(at(11))
    assert clock.due(0.5, None) is None, "within the interval"
    assert clock.due(1.0, at(20)) == (at(18), True)
    clock.read(at(30))  # a writer whose clock is ahead does not move a caught-up watermark
    assert clock.due(2.0, at(19)) is None, "never back"
    assert clock.due(3.0, at(21)) == (at(19), True)
