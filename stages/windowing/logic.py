"""The pure window logic: ``(state, event, policy) -> (state, snapshots)``.

No Kafka, no MongoDB, no clock. Every decision is a function of the session's
state and the event in hand, and *time is event time*: a turn's
``created_at`` or a :class:`~mongomem.models.Watermark`'s ``at``. Watermarks
come from the watcher, in-band (into the same partitions as the turns), and
promise that every turn created before ``at`` is already ahead of them; so a
replay of the turns topic presents every session with the same events in the
same order, and makes the same decisions — whatever the processing speed, and
whether the watcher was down, behind or caught up when it published them.

Rules, applied by :func:`advance` at each event whose time is ``now``:

1. **Gap.** A turn whose ``seq`` is beyond the next expected one leaves a
   *hole* (the writer that allocated the missing seq may have died). Turns
   past the hole wait in ``ahead``. If the hole is still open ``gap_timeout``
   after it was first seen, the missing seqs are declared lost (reported in
   :attr:`WindowResult.lost`): the open window closes with what is there
   (reason ``gap``) and the turns past the hole start the next window.
2. **Idle.** If ``now - last_at >= idle_timeout`` (the session has been quiet),
   everything pending is promoted: holes are given up as in rule 1, and the
   last run closes with reason ``idle``. A turn that arrives after such a
   pause therefore closes the earlier window before it is added. The
   snapshot's ``closed_at`` is ``last_at + idle_timeout`` however the close
   was noticed, so it too is a function of the turns alone. At a
   watermark this is the *watermark rule*: the watermark proves that no turn
   of the session created before ``last_at + idle_timeout`` can still arrive,
   so any later turn would have closed the window anyway — the split is the
   one the turns' own times make, wherever the watermarks fall.

   A turn recorded with its own past time (historical import, SPEC J7) is
   windowed by that time against the session's other turns; but a watermark
   measures rules 1 and 2 from when such turns arrived (their ``recorded_at``,
   kept as ``arrived_at``): the watermark follows the change stream, which
   carries turns in the order they were written, so an import still under way
   is not cut into windows by it, only by its own pauses.
3. **Count.** A turn with the expected ``seq`` joins the open window (and
   pulls in any waiting turns it makes contiguous). Every full
   ``max_messages`` turns close as one snapshot (reason ``count``).

4. **End.** A :class:`~mongomem.models.SessionEnd` (``end_session``) holds a
   seq of the session like a turn. When it is the next one expected, the
   open window closes at once (reason ``end``, ``closed_at`` the latest own
   time of its turns — not the end's, which is the wall clock of the call,
   so a historical import ended today keeps its turns' time) and the end's seq is passed
   over; seqs missing before it (holes) are given up as in rule 1 — the
   end was written after them, so they can no longer arrive. Like every
   other event it is in the log, so a replay closes the same snapshot.

A turn (or end) whose ``seq`` was already promoted (or given up), or that is already
pending, changes nothing: it is reported in :attr:`WindowResult.late` or
:attr:`WindowResult.duplicates`. So at-least-once delivery never creates a
duplicate or overlapping snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pydantic import AwareDatetime, Field

from mongomem.models import Frozen, SessionEnd, SessionKey, Snapshot, SnapshotTurn, Turn, Watermark

__all__ = [
    "Window",
    "WindowPolicy",
    "WindowResult",
    "WindowState",
    "advance",
    "initial_state",
    "snapshot_turn",
]


class WindowPolicy(Frozen):
    """When a window closes. ``gap_timeout`` defaults to ``idle_timeout``.

    ``state_ttl``: a session with nothing pending and no turn for this long
    (event time) is retired from the table (``None``: never; see :meth:`Window.retirable`).
    """

    max_messages: int = Field(ge=1)
    idle_timeout: timedelta
    gap_timeout: timedelta
    state_ttl: timedelta | None = None

    @classmethod
    def of(
        cls, max_messages: int, idle_timeout_s: float, state_ttl_s: float | None = None
    ) -> WindowPolicy:
        idle = timedelta(seconds=idle_timeout_s)
        ttl = None if state_ttl_s is None else timedelta(seconds=state_ttl_s)
        return cls(max_messages=max_messages, idle_timeout=idle, gap_timeout=idle, state_ttl=ttl)


class WindowState(Frozen):
    """One session's window, as kept in the stage's table.

    ``next_seq`` is the first seq not yet promoted; ``open`` holds the
    contiguous run ``next_seq, next_seq+1, …``; ``ahead`` the turns past a
    hole, sorted by seq. ``last_at`` is the latest event time of a pending
    turn and ``gap_since`` when the current hole was first seen.
    ``seen_at`` is the event time of the latest turn applied (it outlives
    the windows, and tells when the session may be retired).
    ``partition``/``offset`` are the adapter's bookkeeping: the source
    position of the last event applied (so a redelivered event is skipped).
    """

    project_id: str
    user_id: str
    session_id: str
    next_seq: int = Field(default=1, ge=1)
    open: tuple[SnapshotTurn, ...] = ()
    ahead: tuple[SnapshotTurn, ...] = ()
    last_at: AwareDatetime | None = None
    gap_since: AwareDatetime | None = None
    seen_at: AwareDatetime | None = None
    #: When the latest pending historical turn arrived (``None``: no such turn).
    arrived_at: AwareDatetime | None = Field(default=None, exclude_if=lambda v: v is None)
    partition: int | None = None
    offset: int | None = None

    @property
    def session(self) -> SessionKey:
        # The fields were validated when the first turn of the session was.
        return SessionKey.model_construct(
            project_id=self.project_id, user_id=self.user_id, session_id=self.session_id
        )

    @property
    def pending(self) -> bool:
        """True while some turn waits to be promoted (the session needs watermarks)."""
        return bool(self.open or self.ahead)

    @property
    def expected(self) -> int:
        """The seq that would extend the open run."""
        return self.next_seq + len(self.open)


def initial_state(session: SessionKey) -> WindowState:
    return WindowState(
        project_id=session.project_id, user_id=session.user_id, session_id=session.session_id
    )


@dataclass(frozen=True)
class WindowResult:
    """What one event did: the new state and what it produced."""

    state: WindowState
    snapshots: tuple[Snapshot, ...] = ()
    late: tuple[int, ...] = ()  # seqs that arrived after their place was promoted
    duplicates: tuple[int, ...] = ()  # seqs already pending
    lost: tuple[int, ...] = ()  # seqs given up after waiting (gap)


#: Why a window closed (:attr:`Snapshot.reason`).
CloseReason = Literal["count", "idle", "gap", "end"]

#: What became of a turn that changed nothing: it came after its place was promoted, or twice.
Arrival = Literal["late", "duplicate"] | None


class Window:
    """One session's window while events are applied to it: :func:`advance`'s working copy.

    Mutable, and never shared: :meth:`of` copies a :class:`WindowState`, the
    ``on_*`` methods apply events in order (each is what :func:`advance` does
    for one event), and :meth:`state` freezes the result. Applying a run of
    events to one ``Window`` is applying them one by one with :func:`advance`,
    without building a state after every event (the windowing stage's batches).
    ``snapshots`` and ``lost`` accumulate over every event applied so far.
    """

    __slots__ = (
        "ahead",
        "arrived_at",
        "gap_since",
        "last_at",
        "lost",
        "next_seq",
        "open",
        "seen_at",
        "session",
        "snapshots",
    )

    def __init__(
        self,
        session: SessionKey,
        next_seq: int = 1,
        open: Iterable[SnapshotTurn] = (),
        ahead: Iterable[SnapshotTurn] = (),
        last_at: AwareDatetime | None = None,
        gap_since: AwareDatetime | None = None,
        seen_at: AwareDatetime | None = None,
        arrived_at: AwareDatetime | None = None,
    ) -> None:
        self.session = session
        self.next_seq = next_seq
        self.open: list[SnapshotTurn] = list(open)
        self.ahead: list[SnapshotTurn] = list(ahead)
        self.last_at = last_at
        self.gap_since = gap_since
        self.seen_at = seen_at
        self.arrived_at = arrived_at
        self.snapshots: list[Snapshot] = []
        self.lost: list[int] = []

    @classmethod
    def of(cls, state: WindowState) -> Window:
        return cls(
            state.session,
            state.next_seq,
            state.open,
            state.ahead,
            state.last_at,
            state.gap_since,
            state.seen_at,
            state.arrived_at,
        )

    def copy(self) -> Window:
        """A new working copy of this window as it stands (nothing closed or lost yet)."""
        return Window(
            self.session,
            self.next_seq,
            self.open,
            self.ahead,
            self.last_at,
            self.gap_since,
            self.seen_at,
            self.arrived_at,
        )

    @property
    def pending(self) -> bool:
        """True while some turn waits to be promoted."""
        return bool(self.open or self.ahead)

    def retirable(self, now: AwareDatetime, policy: WindowPolicy) -> bool:
        """Nothing pending and no turn for ``policy.state_ttl``: the table may forget it.

        Its ``next_seq`` is then one past the last seq promoted (every turn
        it applied has been promoted), which is what a resumed session is
        started from (the last snapshot's ``last_seq`` + 1), so retiring a
        session never changes a snapshot. Only a turn redelivered from more
        than ``state_ttl`` ago would be misread, hence a TTL far above the
        stage's commit interval (the default is 7 days).
        """
        ttl = policy.state_ttl
        return (
            ttl is not None
            and not self.pending
            and self.seen_at is not None
            and now - self.seen_at >= ttl
        )

    def signature(self) -> tuple[object, ...]:
        """Equal before and after an event exactly when the event changed nothing.

        ``open`` is always the run ``next_seq, next_seq+1, …`` and ``ahead``
        only gains a new seq or loses its first, so no event can change their
        turns without changing ``next_seq`` or a length.
        """
        return (
            self.next_seq,
            len(self.open),
            len(self.ahead),
            self.last_at,
            self.gap_since,
            self.seen_at,
            self.arrived_at,
        )

    def state(self, **stamp: int | None) -> WindowState:
        """The window as a :class:`WindowState` (``stamp``: ``partition``/``offset``)."""
        return WindowState(
            project_id=self.session.project_id,
            user_id=self.session.user_id,
            session_id=self.session.session_id,
            next_seq=self.next_seq,
            open=tuple(self.open),
            ahead=tuple(self.ahead),
            last_at=self.last_at,
            gap_since=self.gap_since,
            seen_at=self.seen_at,
            arrived_at=self.arrived_at,
            **stamp,
        )

    # -- events ------------------------------------------------------------------------------
    def on_watermark(self, at: AwareDatetime, policy: WindowPolicy) -> None:
        """No turn written before ``at`` can still arrive (rules 1 and 2, measured from
        when historical turns arrived)."""
        self._time_closes(policy, at, self.arrived_at)

    def on_turn(
        self, turn: SnapshotTurn, policy: WindowPolicy, arrived_at: AwareDatetime | None = None
    ) -> Arrival:
        """A turn of this session (all three rules); says if it was late or a duplicate.

        ``arrived_at`` is the ``recorded_at`` of a turn recorded with its own past time.
        """
        now = turn.created_at
        self._time_closes(policy, now, None)
        seq = turn.seq
        expected = self.next_seq + len(self.open)
        if seq < self.next_seq:
            return "late"
        if seq < expected or (self.ahead and any(t.seq == seq for t in self.ahead)):
            return "duplicate"
        if seq == expected:
            self.open.append(turn)
            if self.ahead:
                self._pull()
        else:
            self.ahead.append(turn)
            self.ahead.sort(key=_by_seq)
            if self.gap_since is None:
                self.gap_since = now
        if not self.ahead:
            self.gap_since = None
        if self.last_at is None or self.last_at < now:
            self.last_at = now
        if self.seen_at is None or self.seen_at < now:
            self.seen_at = now
        if arrived_at is not None or self.arrived_at is not None:
            came = arrived_at or now
            self.arrived_at = came if self.arrived_at is None else max(self.arrived_at, came)
        if len(self.open) >= policy.max_messages:
            self._count_closes(policy, now)
        if not (self.open or self.ahead):
            self.last_at = None
            self.arrived_at = None
        return None

    def on_end(self, seq: int, at: AwareDatetime, policy: WindowPolicy) -> Arrival:
        """``end_session`` at ``seq`` (rule 4, after rules 1 and 2 at ``at``)."""
        self._time_closes(policy, at, self.arrived_at)  # an end just after an import: "end"
        if seq < self.next_seq:
            return "late"
        if seq < self.next_seq + len(self.open) or any(t.seq == seq for t in self.ahead):
            return "duplicate"
        while self.ahead and self.ahead[0].seq < seq:
            self._give_up_hole(at)
            self._count_closes(policy, at)
        expected = self.next_seq + len(self.open)
        if self.open:
            # Stamped with the turns' own time, not the end's: an end_session after a
            # historical import is written now, but its window was said then (SPEC L1).
            self._close(len(self.open), "end", max(t.created_at for t in self.open))
        self.lost.extend(range(expected, seq))
        self.next_seq = seq + 1
        self._pull()  # turns past the end (out of order) start the next window
        self._count_closes(policy, at)
        self.gap_since = at if self.ahead else None
        if not self.pending:
            self.last_at = None
        self.seen_at = at if self.seen_at is None else max(self.seen_at, at)
        return None

    # -- rules -------------------------------------------------------------------------------
    def _close(self, count: int, reason: CloseReason, now: AwareDatetime) -> None:
        """Close the first ``count`` open turns as one snapshot.

        Built without validation, as everything validation would check holds
        already: the ids are the session's, the turns validated ones forming
        the contiguous run ``first..last``, the id made from them, ``now`` an
        aware event time (``tests/property/test_windowing_fast_paths.py``).
        """
        turns, self.open = self.open[:count], self.open[count:]
        first, last = turns[0].seq, turns[-1].seq
        session = self.session
        self.snapshots.append(
            Snapshot.model_construct(
                snapshot_id=Snapshot.make_id(session, first, last),
                project_id=session.project_id,
                user_id=session.user_id,
                session_id=session.session_id,
                first_seq=first,
                last_seq=last,
                turns=tuple(turns),
                reason=reason,
                closed_at=now,
            )
        )
        self.next_seq = last + 1

    def _pull(self) -> None:
        """Move waiting turns that continue the open run into it."""
        while self.ahead and self.ahead[0].seq == self.next_seq + len(self.open):
            self.open.append(self.ahead.pop(0))

    def _give_up_hole(self, now: AwareDatetime) -> None:
        """Declare the seqs before the first waiting turn lost and move past them."""
        if self.open:
            self._close(len(self.open), "gap", now)
        start = self.ahead[0].seq
        self.lost.extend(range(self.next_seq, start))
        self.next_seq = start
        self._pull()
        self.gap_since = now if self.ahead else None

    def _count_closes(self, policy: WindowPolicy, now: AwareDatetime) -> None:
        while len(self.open) >= policy.max_messages:
            self._close(policy.max_messages, "count", now)
            self._pull()

    def _time_closes(
        self, policy: WindowPolicy, now: AwareDatetime, arrived: AwareDatetime | None
    ) -> None:
        """Rules 1 and 2 at ``now``; ``arrived`` (a tick's view of historical turns) moves
        the times they are measured from to no earlier than it."""
        if (
            arrived is None
            and not self.ahead
            and (self.last_at is None or now - self.last_at < policy.idle_timeout)
        ):
            return  # nothing is due (the usual case: checked without the general rules)
        while (
            self.ahead
            and self.gap_since is not None
            and now - _since(self.gap_since, arrived) >= policy.gap_timeout
        ):
            self._give_up_hole(now)
            self._count_closes(policy, now)
        if self.last_at is not None and now - _since(self.last_at, arrived) >= policy.idle_timeout:
            # Closed at the instant the session became idle, not at the event that noticed:
            # the next turn or any later watermark closes the same snapshot.
            at = self.last_at + policy.idle_timeout
            while self.ahead:
                self._give_up_hole(at)
                self._count_closes(policy, at)
            if self.open:
                self._close(len(self.open), "idle", at)
            self.last_at = None
            self.gap_since = None
            self.arrived_at = None


def _since(at: AwareDatetime, arrived: AwareDatetime | None) -> AwareDatetime:
    """When a rule's wait started: ``at``, or the arrival of historical turns if later."""
    return at if arrived is None else max(at, arrived)


def _by_seq(turn: SnapshotTurn) -> int:
    return turn.seq


def snapshot_turn(turn: Turn) -> SnapshotTurn:
    """The part of a turn that a window keeps and a snapshot carries."""
    return SnapshotTurn.model_validate(
        {
            "turn_id": turn.turn_id,
            "seq": turn.seq,
            "role": turn.role,
            "content": turn.content,
            "created_at": turn.created_at,
            **({} if turn.speaker is None else {"speaker": turn.speaker}),
        }
    )


def advance(
    state: WindowState, event: Turn | SessionEnd | Watermark, policy: WindowPolicy
) -> WindowResult:
    """Apply one event to one session's window (see the module docstring for the rules).

    ``event`` is a turn or an end of this session, or a watermark of its partition;
    a watermark of a watcher share that does not own the session changes nothing.
    """
    window = Window.of(state)
    before = window.signature()
    late: tuple[int, ...] = ()
    duplicates: tuple[int, ...] = ()
    if isinstance(event, Turn | SessionEnd):
        if (event.project_id, event.user_id, event.session_id) != (
            state.project_id,
            state.user_id,
            state.session_id,
        ):
            raise ValueError("an event of another session was applied to this window")
        if isinstance(event, Turn):
            outcome = window.on_turn(snapshot_turn(event), policy, event.recorded_at)
        else:
            outcome = window.on_end(event.seq, event.created_at, policy)
        if outcome == "late":
            late = (event.seq,)
        elif outcome == "duplicate":
            duplicates = (event.seq,)
    elif event.covers(state.project_id, state.user_id, state.session_id):
        window.on_watermark(event.at, policy)  # another share's watermark promises nothing here
    unchanged = window.signature() == before
    return WindowResult(
        state=state if unchanged else window.state(partition=state.partition, offset=state.offset),
        snapshots=tuple(window.snapshots),
        late=late,
        duplicates=duplicates,
        lost=tuple(window.lost),
    )
