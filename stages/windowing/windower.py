"""``SnapshotWindower``: applies the pure window logic to records of the turns topic.

It sees one record at a time — ``(partition, offset, key, value)`` — and
reaches the outside only through the protocols of :mod:`mongomem.stages.windowing.ports`:
a :class:`WindowStore` (the table of session states), a :class:`SnapshotSink`
(MongoDB + the snapshots topic), a :class:`DeadLetterSink` and, optionally,
:class:`ResumePoints` (where unknown sessions resume). The faust adapter
(:mod:`mongomem.stages.windowing.app`) plugs a faust table into the store; the tests
plug in dictionaries.

Per record:

* a **turn** advances its session's window; a **session end**
  (``end_session``) closes it at once;
* a **watermark** (the watcher's, :class:`~mongomem.models.Watermark`) advances
  every session of that partition that has turns pending (found through an
  in-memory index rebuilt from the store after a rebalance) and is in the
  share of the watcher that made it (``share`` of ``shares``, see
  :mod:`mongomem.buckets`); a ``window-tick``
  of an older version is skipped;
* anything else is a poison message and goes to the dead-letter topic.

Ordering per session: the snapshots an event closes are delivered first
(awaited), and only then is the new state written to the store, stamped with
the record's position. A record at or before a session's stamped position has
already been applied to it and is skipped, so re-reading records after a crash
(the committed offset lags the table's changelog) never applies an event
twice.

Batches: :meth:`SnapshotWindower.process_batch` applies a run of one
partition's records at once. The pure logic runs over all of them in order
(against the store plus the batch's own not-yet-written states), the snapshots
they close are delivered concurrently — one session's in order, sessions side
by side — and only when all are delivered is each changed session's *final*
state written, once. That is exactly what applying the records one by one
would leave in the store (the same states, stamped with the same positions,
and the same snapshots), with one state write per session per batch instead
of one per record. If anything in the batch fails, nothing of it has been
written, and the batch is applied again record by record with
:meth:`~SnapshotWindower.process` (snapshots already delivered are delivered
again: idempotent), so failures are handled exactly as for single records.

Retirement: a session with nothing pending and no turn for the state TTL
(``MONGOMEM_WINDOW_STATE_TTL_S``, event time, default 7 days) is removed from
the table at a watermark of its watcher share — each (partition, share) is
scanned every TTL/8 of that share's watermark time, and a watermark retires
only sessions of its own share (another share's watcher may be far behind, and
its watermarks promise nothing about them) — and a tombstone goes to the
changelog, so the table holds the sessions that are alive, not every session
ever seen. A turn of a session the table does not know, other
than its seq 1, asks :class:`ResumePoints` for the session's last snapshotted
seq and starts after it. That is where a retired session stood (all its turns
were promoted), so retiring changes no snapshot; a consumer group that starts
mid-topic also picks sessions up where they are, without false gaps. A turn
redelivered more than the TTL after it was first applied is ignored as late
— which is why the TTL is far above the commit interval. When a failed batch
is applied again record by record, its sessions resume where its plan said
(MongoDB may already hold some of the batch's snapshots by then).

Failures: a retriable error (MongoDB or Kafka unavailable) is retried with
backoff ``max_attempts`` times and then raised — the record stays unacknowledged
and the stage stops, because dead-lettering a turn on an outage would cut it
out of its window. A message that cannot be decoded goes to the dead-letter
topic at once; any other error is retried and then dead-lettered (the runtime's
:class:`~mongomem.stages.runtime.RetryPolicy`, through its
:func:`~mongomem.stages.runtime.dead_letter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from mongomem.errors import InputError, MessageDecodeError
from mongomem.metrics import MESSAGES
from mongomem.models import Snapshot, Watermark
from mongomem.stages.runtime import Decision, Message, RetryPolicy, dead_letter
from mongomem.stages.windowing.logic import Window
from mongomem.stages.windowing.ports import (
    BulkSnapshotSink,
    DeadLetterSink,
    DictWindowStore,
    ErasureCheck,
    Policies,
    ResumePoints,
    SnapshotSink,
    WindowStore,
)
from mongomem.stages.windowing.reader import SESSION_EVENTS, EndRecord, TurnReader, TurnRecord

__all__ = [
    "STAGE",
    "BulkSnapshotSink",
    "DeadLetterSink",
    "DictWindowStore",
    "PlannedBatch",
    "Policies",
    "Record",
    "SnapshotSink",
    "SnapshotWindower",
    "WindowStore",
    "WindowerStats",
]

STAGE = "windowing"

#: Records decoded or planned between two yields to the event loop: a batch's planning
#: (CPU only, tens of milliseconds for a full poll) lets the deliveries in flight read
#: their replies and send their next requests meanwhile.
PLAN_SLICE = 256

log = logging.getLogger("mongomem.windowing")


@dataclass
class WindowerStats:
    turns: int = 0
    watermarks: int = 0
    ends: int = 0  # session ends (end_session)
    ignored_ticks: int = 0  # window-tick records of an older version (they prove nothing)
    snapshots: int = 0
    late: int = 0
    duplicates: int = 0
    redelivered: int = 0
    lost: int = 0
    dead_letters: int = 0
    retired: int = 0  # sessions forgotten after their state TTL
    resumed: int = 0  # unknown sessions started past their last snapshot
    erased: int = 0  # events of erased sessions, dropped (SPEC J3)


#: One record of the turns topic within a partition: ``(offset, key, value)``.
Record = tuple[int, bytes | None, bytes | None]

#: A watcher share, as its watermarks name it: ``(share, shares)``.
Share = tuple[int, int]


@dataclass
class _Open:
    """A session's working window during a pass, and the position of its last change."""

    window: Window
    offset: int | None = None  # the source position of the last event that changed it
    retired: bool = False  # forget the session when the batch is carried out

    @property
    def pending(self) -> bool:
        return self.window.pending


@dataclass
class PlannedBatch:
    """A batch of one partition's records, applied to working windows but not carried out.

    ``windows`` holds the working window of every session the records touched
    (the records of a batch see each other's effects through them). Nothing
    of it is in the store, the sinks or the dead-letter topic until
    :meth:`SnapshotWindower.finish_batch`.
    """

    partition: int
    records: Sequence[Record]
    after: PlannedBatch | None = None  # the batch in flight when this one was planned
    windows: dict[bytes, _Open] = field(default_factory=dict)
    letters: list[tuple[Record, InputError]] = field(default_factory=list)
    stats: WindowerStats = field(default_factory=WindowerStats)
    applied: int = 0  # records applied (not dead-lettered)
    failed: Exception | None = None  # planning itself failed (a bug): apply record by record
    #: Where sessions the table does not know start (looked up before planning).
    starts: dict[bytes, int] = field(default_factory=dict)
    #: The records already decoded before planning, by offset.
    events: dict[int, TurnRecord | EndRecord | Watermark | InputError] = field(default_factory=dict)
    #: Event time of the last retirement scan of the partition per watcher share
    #: (``(share, shares)``), for the shares this batch scanned.
    scanned_at: dict[Share, datetime] = field(default_factory=dict)
    #: Sessions of the batch that are erased: their events are dropped, their state removed.
    erased: set[bytes] = field(default_factory=set)

    @property
    def snapshots(self) -> list[tuple[bytes, Snapshot]]:
        """Every snapshot the batch closes, each session's in order."""
        return [(k, s) for k, o in self.windows.items() for s in o.window.snapshots]

    def earlier(self, key: bytes) -> _Open | None:
        """The session's window as the batch planned before this one left it, if it touched it."""
        return self.after.windows.get(key) if self.after is not None else None

    def last_scan(self, share: Share, committed: datetime | None) -> datetime | None:
        """When the partition was last scanned for ``share``'s retirements, this batch included."""
        batch: PlannedBatch | None = self
        while batch is not None:
            scanned = batch.scanned_at.get(share)
            if scanned is not None:
                return scanned
            batch = batch.after
        return committed


def _add_stats(total: WindowerStats, part: WindowerStats) -> None:
    for name in vars(part):
        setattr(total, name, getattr(total, name) + getattr(part, name))


@dataclass
class SnapshotWindower:
    """Applies turns and watermarks of the turns topic to the session windows."""

    store: WindowStore
    sink: SnapshotSink
    policies: Policies
    dead_letters: DeadLetterSink
    topic: str
    max_attempts: int = 4
    backoff_s: float = 0.2
    backoff_max_s: float = 5.0
    #: At most this many sessions' snapshots are being delivered at once (in a batch).
    max_concurrent_deliveries: int = 64
    stats: WindowerStats = field(default_factory=WindowerStats)
    on_snapshot: Callable[[Snapshot], None] | None = None
    #: Where sessions the table does not know resume (``None``: they start at seq 1).
    resume: ResumePoints | None = None
    #: The erasure register (SPEC J3): erased sessions' turns are dropped, with their state.
    erasures: ErasureCheck | None = None
    _open: dict[int, set[bytes]] = field(default_factory=dict, repr=False)
    _indexed: set[int] = field(default_factory=set, repr=False)
    #: Event time of the last retirement scan per (partition, watcher share).
    _scanned_at: dict[tuple[int, Share], datetime] = field(default_factory=dict, repr=False)
    #: While a failed batch is applied record by record: where its unknown sessions start —
    #: as its plan looked up (before any of its snapshots was delivered), or as retired.
    _replanning: dict[bytes, int] | None = field(default=None, repr=False)
    _reader: TurnReader = field(default_factory=TurnReader, repr=False)

    def invalidate_index(self) -> None:
        """Forget which sessions are open (after a rebalance; rebuilt at the next watermark)."""
        self._open.clear()
        self._indexed.clear()
        self._scanned_at.clear()

    async def process_batch(self, partition: int, records: Sequence[Record]) -> None:
        """Apply records of one partition, in order; returns once all may be acknowledged.

        Leaves the store, the sinks and the dead-letter topic as calling
        :meth:`process` for each record would (see the module docstring).
        """
        if records:
            await self.finish_batch(await self.plan_batch(partition, records))

    async def plan_batch(
        self, partition: int, records: Sequence[Record], after: PlannedBatch | None = None
    ) -> PlannedBatch:
        """Apply records of one partition to working windows (nothing written).

        The only I/O is asking :attr:`resume` where the sessions that the
        table does not know, and whose first turn here is not seq 1, resume
        (a session retired after its TTL, or a consumer group that starts
        mid-topic). ``after`` is a batch of the same partition planned before
        and not yet finished: this batch continues from the windows it left.
        At most one such batch may be in flight, and it must finish before this one.
        """
        run = PlannedBatch(partition, records, after)
        await self._prepare(run)
        try:
            for i, record in enumerate(records):
                if i and not i % PLAN_SLICE:
                    await asyncio.sleep(0)  # let the deliveries in flight go on meanwhile
                self._plan(run, *record)
        except Exception as exc:
            run.failed = exc
        return run

    async def _prepare(self, run: PlannedBatch) -> None:
        """Decode the records; find where unknown sessions resume (:attr:`resume`)."""
        first: dict[bytes, TurnRecord | EndRecord] = {}
        watermarked = False
        for i, (offset, _, value) in enumerate(run.records):
            if i and not i % PLAN_SLICE:
                await asyncio.sleep(0)
            try:
                event = self._reader.read(value)
            except InputError as exc:
                run.events[offset] = exc
                continue
            except Exception:  # a bug: planning meets it again and handles it as a failure
                continue
            if event is None:
                continue  # skipped; planning reads it again
            run.events[offset] = event
            if isinstance(event, SESSION_EVENTS):
                if event.key not in first:
                    first[event.key] = event
            else:
                watermarked = True
        if self.erasures is not None and first:
            gone = await self.erasures.erased_among(r.session for r in first.values())
            run.erased = {k for k, r in first.items() if r.session in gone}
            first = {k: r for k, r in first.items() if k not in run.erased}
        if self.erasures is not None and watermarked:
            # an erased session that is only waiting (no event of its own) is dropped too
            waiting = {
                k: s.session
                for k in self._open_in(run.partition)
                if k not in run.erased and (s := self.store.get(k)) is not None
            }
            if waiting:
                idle_gone = await self.erasures.erased_among(waiting.values())
                run.erased |= {k for k, s in waiting.items() if s in idle_gone}
        if self.resume is None:
            return
        unknown = {
            key: record
            for key, record in first.items()
            if record.seq > 1
            and run.earlier(key) is None
            and self.store.get(key) is None
            and key not in run.windows
        }
        if self._replanning is not None:
            # The batch failed after some of its snapshots were delivered: what MongoDB says
            # now may be ahead of these records. Its plan asked before any was delivered.
            for key in unknown:
                if key in self._replanning:
                    run.starts[key] = self._replanning[key]
            unknown = {k: r for k, r in unknown.items() if k not in self._replanning}
        if not unknown:
            return
        found = await self.resume.last_promoted({r.session: r.seq for r in unknown.values()})
        for key, record in unknown.items():
            run.starts[key] = found.get(record.session, 0) + 1

    async def finish_batch(self, run: PlannedBatch) -> bool:
        """Deliver a planned batch's snapshots and dead letters, then write its states.

        Returns ``True`` when it went as planned, ``False`` when it failed and
        was applied record by record instead (a batch planned *after* it must
        then be planned again, from the store).
        """
        partition, records = run.partition, run.records
        run.after = None  # planned: the batch before is applied now (and must not be kept)
        try:
            if run.failed is not None:
                raise run.failed
            await self._deliver_concurrently(run.snapshots)
            for (offset, key, value), exc in run.letters:
                await self._dead_letter(partition, offset, key, value, exc, 1)
        except Exception as exc:
            log.warning(
                "batch %s[%d]@%d..%d failed (%s: %s); applying it record by record",
                self.topic,
                partition,
                records[0][0],
                records[-1][0],
                type(exc).__name__,
                exc,
            )
            self._replanning = dict(run.starts)
            try:
                for offset, key, value in records:
                    await self.process(partition, offset, key, value)
            finally:
                self._replanning = None
            return False
        self._commit(run)
        return True

    async def process(
        self, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        """Apply one record; returns once it may be acknowledged."""
        attempt = 0
        policy = self._policy()
        while True:
            attempt += 1
            try:
                await self._apply(partition, offset, key, value)
                return
            except Exception as exc:
                decision = policy.decide(exc, attempt)
                if decision is Decision.FATAL:
                    raise
                if decision is Decision.OUTAGE and attempt >= self.max_attempts:
                    log.error(
                        "giving up on %s[%d]@%d after %d attempts: %s",
                        self.topic,
                        partition,
                        offset,
                        attempt,
                        exc,
                    )
                    raise  # the stage restarts from its checkpoint (nothing committed past it)
                if decision is Decision.DEAD_LETTER:
                    await self._dead_letter(partition, offset, key, value, exc, attempt)
                    return
                log.warning(
                    "retrying %s[%d]@%d after %s: %s",
                    self.topic,
                    partition,
                    offset,
                    type(exc).__name__,
                    exc,
                )
                await asyncio.sleep(policy.delay(attempt, exc))

    def _policy(self) -> RetryPolicy:
        return RetryPolicy(
            base_s=self.backoff_s, cap_s=self.backoff_max_s, max_attempts=self.max_attempts
        )

    async def _dead_letter(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        exc: BaseException,
        attempts: int,
    ) -> None:
        record = Message(self.topic, partition, offset, key, value)
        await dead_letter(self.dead_letters, STAGE, record, exc, attempts)
        self.stats.dead_letters += 1

    async def _apply(
        self, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> None:
        """One record on its own: plan, deliver in order, write (raises ``InputError`` as is)."""
        run = PlannedBatch(partition, [(offset, key, value)])
        await self._prepare(run)
        self._plan(run, offset, key, value, strict=True)
        for _, snapshot in run.snapshots:
            await self.sink.deliver(snapshot)
        self._commit(run)

    def _plan(
        self,
        run: PlannedBatch,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        *,
        strict: bool = False,
    ) -> None:
        """Apply one record to ``run`` (no I/O); note a poison record, or raise it if ``strict``."""
        try:
            event = run.events.pop(offset, None)
            if event is None:
                event = self._reader.read(value)
            elif isinstance(event, InputError):
                raise event
            if isinstance(event, SESSION_EVENTS) and key is not None and key != event.key:
                # A session's turns must share one partition, or its window splits.
                raise MessageDecodeError(
                    f"seq {event.seq} of session {event.session.session_id!r} is not keyed "
                    "by its session"
                )
        except InputError as exc:
            if strict:
                raise
            run.letters.append(((offset, key, value), exc))
            return
        run.applied += 1
        if event is None:
            run.stats.ignored_ticks += 1
            return
        if isinstance(event, SESSION_EVENTS) and event.key in run.erased:
            run.stats.erased += 1  # SPEC J3: an erased session's event leaves nothing behind
            run.windows.pop(event.key, None)
            return
        if isinstance(event, TurnRecord):
            run.stats.turns += 1
            entry = self._enter(run, event.key, offset, event)
            if entry is not None:
                window = entry.window
                before, lost = window.signature(), len(window.lost)
                policy = self.policies.for_project(event.session.project_id)
                outcome = window.on_turn(event.turn, policy, event.arrived_at)
                if outcome is not None:
                    self._report_turn(run.stats, window, event.turn.seq, outcome)
                self._settle(run.stats, entry, before, lost, offset)
            return
        if isinstance(event, EndRecord):
            run.stats.ends += 1
            entry = self._enter(run, event.key, offset, event)
            if entry is not None:
                window = entry.window
                before, lost = window.signature(), len(window.lost)
                policy = self.policies.for_project(event.session.project_id)
                outcome = window.on_end(event.seq, event.end.created_at, policy)
                if outcome is not None:
                    self._report_turn(run.stats, window, event.seq, outcome)
                self._settle(run.stats, entry, before, lost, offset)
            return
        run.stats.watermarks += 1
        for session_key in self._pending_sessions(run):
            if session_key in run.erased or not _covers(event, session_key):
                continue
            entry = self._enter(run, session_key, offset)
            if entry is None or not entry.pending:
                continue
            window = entry.window
            before, lost = window.signature(), len(window.lost)
            window.on_watermark(event.at, self.policies.for_project(window.session.project_id))
            self._settle(run.stats, entry, before, lost, offset)
        self._retire(run, event, offset)

    def _retire(self, run: PlannedBatch, watermark: Watermark, offset: int) -> None:
        """At a watermark, mark the sessions of its partition and share that outlived their TTL.

        Each (partition, share) is scanned at most once per scan period of that
        share's watermark time: shares' watchers advance independently, so a
        caught-up share neither retires another's sessions nor delays its scans.
        """
        period = self.policies.retirement_scan_period
        if period is None:
            return
        at, share = watermark.at, (watermark.share, watermark.shares)
        last = run.last_scan(share, self._scanned_at.get((run.partition, share)))
        if last is not None and at - last < period:
            return
        run.scanned_at[share] = at
        keys = {k for k, s in self.store.items() if s.partition == run.partition}
        keys.update(run.windows)
        if run.after is not None:
            keys.update(run.after.windows)
        for session_key in sorted(keys):
            if not _covers(watermark, session_key):
                continue  # another share's session: this watermark promises nothing about it
            entry = run.windows.get(session_key)
            if entry is None:
                earlier = run.earlier(session_key)
                view = earlier.window if earlier is not None else None
                if earlier is None:
                    stored = self.store.get(session_key)
                    if stored is None:
                        continue
                    view = Window.of(stored)
                assert view is not None
                policy = self.policies.for_project(view.session.project_id)
                if not view.retirable(at, policy):
                    continue
                entry = self._enter(run, session_key, offset)
                if entry is None:
                    continue
            if entry.retired:
                continue
            policy = self.policies.for_project(entry.window.session.project_id)
            if entry.window.retirable(at, policy):
                entry.retired = True

    def _pending_sessions(self, run: PlannedBatch) -> list[bytes]:
        """The sessions of ``run``'s partition that may have turns waiting, in key order."""
        partition = run.partition
        candidates = self._open_in(partition)
        candidates.update(run.windows)
        if run.after is not None:
            candidates.update(run.after.windows)
        out = []
        for session_key in sorted(candidates):
            if session_key in run.windows or run.earlier(session_key) is not None:
                out.append(session_key)
                continue
            stored = self.store.get(session_key)
            if stored is None or not stored.pending:  # the store says so: forget it
                self._open.get(partition, set()).discard(session_key)
                continue
            out.append(session_key)
        return out

    def _enter(
        self,
        run: PlannedBatch,
        session_key: bytes,
        offset: int,
        record: TurnRecord | EndRecord | None = None,
    ) -> _Open | None:
        """The session's working window in ``run``; ``None`` if the record is applied already.

        A new working window starts from the batch planned before (if it
        touched the session), else from the store. Only the store's state can
        be ahead of a record: a batch's records come after those of the batch
        before, and that one has already skipped what the store had applied.
        """
        entry = run.windows.get(session_key)
        if entry is not None:
            if entry.retired and record is not None:
                # Retired in this batch and back already: its window says what the lookup
                # would (one past its last snapshot), so keep it; count both, as if apart.
                entry.retired = False
                run.stats.retired += 1
                run.stats.resumed += 1
            return entry
        earlier = run.earlier(session_key)
        if earlier is not None:
            if earlier.retired:
                if record is None:
                    return None  # a watermark: the session is gone
                run.stats.resumed += 1  # the batch before retires it; it is back
            window = earlier.window.copy()
        else:
            stored = self.store.get(session_key)
            if stored is not None:
                stamp = stored.offset if stored.partition == run.partition else None
                if stamp is not None and offset <= stamp:
                    run.stats.redelivered += 1
                    return None
                window = Window.of(stored)
            elif record is not None:
                start = run.starts.get(session_key, 1)
                window = Window(record.session, next_seq=start)
                if start > 1:
                    run.stats.resumed += 1
                    log.info(
                        "session %s/%s/%s is not in the table: resuming after seq %d, its "
                        "last snapshot",
                        record.session.project_id,
                        record.session.user_id,
                        record.session.session_id,
                        start - 1,
                    )
            else:
                return None  # a watermark for a session nobody has seen
        entry = run.windows[session_key] = _Open(window)
        return entry

    def _settle(
        self, stats: WindowerStats, entry: _Open, before: tuple[object, ...], lost: int, offset: int
    ) -> None:
        """After an event: stamp the window if the event changed it, report lost seqs."""
        window = entry.window
        if window.signature() != before:
            entry.offset = offset
        if len(window.lost) > lost:
            seqs = window.lost[lost:]
            stats.lost += len(seqs)
            session = window.session
            log.warning(
                "session %s/%s/%s: seq(s) %s never arrived; closed the window without them",
                session.project_id,
                session.user_id,
                session.session_id,
                seqs,
            )

    def _report_turn(self, stats: WindowerStats, window: Window, seq: int, outcome: str) -> None:
        if outcome == "late":
            stats.late += 1
            log.info("late turn(s) %s of session %s ignored", [seq], window.session.session_id)
        else:
            stats.duplicates += 1

    def _open_in(self, partition: int) -> set[bytes]:
        if partition not in self._indexed:
            self._open[partition] = {
                k for k, s in self.store.items() if s.partition == partition and s.pending
            }
            self._indexed.add(partition)
        return set(self._open.get(partition, ()))

    async def _deliver_concurrently(self, snapshots: list[tuple[bytes, Snapshot]]) -> None:
        """Deliver each session's snapshots in order, sessions concurrently (or in bulk)."""
        if not snapshots:
            return
        if isinstance(self.sink, BulkSnapshotSink):
            await self.sink.deliver_many([snapshot for _, snapshot in snapshots])
            return
        chains: dict[bytes, list[Snapshot]] = {}
        for session_key, snapshot in snapshots:
            chains.setdefault(session_key, []).append(snapshot)
        if len(chains) == 1:
            for _, snapshot in snapshots:
                await self.sink.deliver(snapshot)
            return
        slots = asyncio.Semaphore(self.max_concurrent_deliveries)

        async def deliver_chain(chain: list[Snapshot]) -> None:
            async with slots:
                for snapshot in chain:
                    await self.sink.deliver(snapshot)

        async with asyncio.TaskGroup() as group:
            for chain in chains.values():
                group.create_task(deliver_chain(chain))

    def _commit(self, run: PlannedBatch) -> None:
        """Every snapshot of ``run`` is delivered: write its states, count, report."""
        partition = run.partition
        index = self._open.setdefault(partition, set())
        for session_key in run.erased:
            if self.store.get(session_key) is not None:
                self.store.delete(session_key)  # a tombstone in the changelog
            index.discard(session_key)
        for session_key, entry in run.windows.items():
            if session_key in run.erased:
                continue
            if entry.retired:
                self.store.delete(session_key)
                index.discard(session_key)
                run.stats.retired += 1
                if self._replanning is not None:  # it may come back within the failed batch
                    self._replanning[session_key] = entry.window.next_seq
                continue
            if entry.offset is None:
                continue  # no event changed it: nothing to write
            state = entry.window.state(partition=partition, offset=entry.offset)
            self.store.put(session_key, state)
            if entry.pending:
                index.add(session_key)
            else:
                index.discard(session_key)
        for share, scanned in run.scanned_at.items():
            self._scanned_at[(partition, share)] = scanned
        snapshots = run.snapshots
        run.stats.snapshots += len(snapshots)
        _add_stats(self.stats, run.stats)
        if run.applied:
            MESSAGES.labels(STAGE, "ok").inc(run.applied)
        if self.on_snapshot is not None:
            for _, snapshot in snapshots:
                self.on_snapshot(snapshot)


def _covers(watermark: Watermark, session_key: bytes) -> bool:
    """Is the session of ``session_key`` (:meth:`SessionKey.kafka_key`) in the watermark's share?"""
    if watermark.shares == 1:
        return True
    project_id, user_id, session_id = session_key.decode().split("\x00")
    return watermark.covers(project_id, user_id, session_id)
