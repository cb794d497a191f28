"""The decisions of the change-stream watcher, free of MongoDB and Kafka.

:mod:`mongomem.stages.watcher` is the adapter; everything here is plain data and plain
functions, tested without servers:

* :func:`usable_token` — is a stored checkpoint value a resume token at all?
* :func:`open_failure_verdict` — what a server error on opening/reading the
  stream means (history lost, or ask the server again without a token).
* :class:`PublishLedger` — per-session high-water marks: what may be skipped
  as already published, and which marks the next checkpoint must store.
* :class:`FlushPolicy` — when the pending records are sent and checkpointed
  (and when they wait for Kafka to acknowledge the previous flush).
* :class:`WatermarkClock` — which in-band watermark (if any) is due, from how
  far the change stream has been read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from mongomem.buckets import share_filter
from mongomem.models import stable_id

__all__ = [
    "HISTORY_LOST_CODES",
    "READ_PIPELINE",
    "WATCH_PIPELINE",
    "FlushPolicy",
    "PublishLedger",
    "Slot",
    "WatermarkClock",
    "checkpoint_updates",
    "mark_id",
    "open_failure_verdict",
    "read_pipeline",
    "token_id",
    "usable_token",
]

#: (project_id, user_id, session_id)
Slot = tuple[str, str, str]

#: Only inserts: a turn is never updated, and the full document comes with it.
WATCH_PIPELINE: list[dict[str, Any]] = [{"$match": {"operationType": "insert"}}]
#: What the watcher reads of each insert: the resume token (``_id``, which a
#: change stream must keep) and the turn. The rest of a change event (the
#: namespace, the document key, the cluster time) is neither sent nor decoded.
READ_PIPELINE: list[dict[str, Any]] = [*WATCH_PIPELINE, {"$project": {"fullDocument": 1}}]


def read_pipeline(share: int = 0, shares: int = 1) -> list[dict[str, Any]]:
    """:data:`READ_PIPELINE` of watcher ``share`` of ``shares``: only its sessions' inserts.

    One share (``shares = 1``) reads every insert, exactly :data:`READ_PIPELINE`.
    Otherwise the ``$match`` also keeps ``fullDocument.bucket % shares == share``
    (share 0 also the documents without a bucket), evaluated by the server.
    """
    mine = share_filter(share, shares, prefix="fullDocument.")
    if not mine:
        return READ_PIPELINE
    return [{"$match": {"operationType": "insert", **mine}}, {"$project": {"fullDocument": 1}}]


#: Server codes that mean "this resume token cannot be resumed from":
#: CappedPositionLost, InvalidResumeToken, ChangeStreamFatalError,
#: ChangeStreamHistoryLost.
HISTORY_LOST_CODES = frozenset({136, 260, 280, 286})


def token_id(topic: str, share: int = 0, shares: int = 1) -> str:
    """``_id`` of the resume-token document of watcher ``share`` of ``shares`` in ``checkpoints``.

    One watcher (``shares = 1``) keeps the id it always had; each share of
    several has its own, so a share never resumes from another's token.
    """
    if shares == 1:
        return f"watcher:{topic}"
    return f"watcher:{topic}:share-{share}-of-{shares}"


def mark_id(topic: str, slot: Slot) -> str:
    """``_id`` of one session's high-water-mark document in ``checkpoints``."""
    return f"watcher:{topic}:{stable_id('mark', *slot)}"


def checkpoint_updates(
    topic: str,
    marks: Mapping[Slot, int],
    token: Mapping[str, Any] | None,
    now: datetime,
    *,
    share: int = 0,
    shares: int = 1,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The upserts (filter, update) of one checkpoint: marks first, the token last.

    Marks use ``$max``, so a replayed or late commit never moves one back. A
    mark is the session's (highest seq Kafka acknowledged), whichever share
    wrote it, so it has one id per session; the token is the share's own
    (:func:`token_id`).
    """
    updates: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (
            {"_id": mark_id(topic, slot)},
            {
                "$max": {"seq": seq},
                "$set": {"updated_at": now},
                "$setOnInsert": {
                    "kind": "watcher-mark",
                    "topic": topic,
                    "project_id": slot[0],
                    "user_id": slot[1],
                    "session_id": slot[2],
                },
            },
        )
        for slot, seq in marks.items()
    ]
    if token is not None:
        updates.append(
            (
                {"_id": token_id(topic, share, shares)},
                {
                    "$set": {"token": dict(token), "updated_at": now},
                    "$setOnInsert": {
                        "kind": "watcher-token",
                        "topic": topic,
                        "share": share,
                        "shares": shares,
                    },
                },
            )
        )
    return updates


def usable_token(value: object) -> dict[str, Any] | None:
    """The stored value as a resume token, or ``None`` when it cannot be one.

    A resume token is a document with a ``_data`` field (a hex string on
    MongoDB and on mongo-java-server). Anything else — a token written by a
    different server kind, a hand-edited document — is treated as lost.
    """
    if not isinstance(value, Mapping) or "_data" not in value:
        return None
    data = value["_data"]
    if not isinstance(data, str | bytes) or not data:
        return None
    return dict(value)


def open_failure_verdict(
    code: int | None, *, with_token: bool
) -> Literal["lost", "probe", "retry"]:
    """What a server-side failure of a change stream means.

    * ``lost``: the server said the token's history is gone (or the token is
      invalid) — back-fill.
    * ``probe``: opening *with a token* failed for a reason the server did
      not name (mongo-java-server answers "Unknown error" for a token it
      cannot parse); the adapter opens a stream without a token — if that
      works, the token was the problem and it is lost.
    * ``retry``: anything else; reopen from the stored token later.
    """
    if code in HISTORY_LOST_CODES:
        return "lost"
    if with_token:
        return "probe"
    return "retry"


@dataclass
class PublishLedger:
    """Per-session high-water marks of published turns.

    ``known`` holds, after a back-fill, the highest seq known to be published
    for each session; a turn at or below it is a duplicate of one already in
    Kafka and is skipped (this removes the overlap between the back-fill scan
    and the stream opened before it). Without a back-fill ``known`` stays
    empty and nothing is skipped.

    ``unflushed`` collects, since the last :meth:`seal`, the highest seq handed
    to Kafka per session; a seal files them under the offset of the records
    they came from, and the checkpoint that covers that offset (everything
    below it acknowledged by Kafka) stores them with ``$max``, so a later
    back-fill knows where each session stands.
    """

    known: dict[Slot, int] = field(default_factory=dict)
    unflushed: dict[Slot, int] = field(default_factory=dict)
    tracking: bool = False
    #: Marks of sealed batches, oldest first: (end offset, marks).
    sealed: deque[tuple[int, dict[Slot, int]]] = field(default_factory=deque)

    def seed(self, marks: Iterable[tuple[Slot, int]]) -> None:
        """Start a back-fill from the stored marks: track every session from now on."""
        for slot, seq in marks:
            if seq > self.known.get(slot, 0):
                self.known[slot] = seq
        self.tracking = True

    def end_backfill(self) -> None:
        """Stream mode: keep skipping overlap for known sessions, stop adding new ones."""
        self.tracking = False

    def admit(self, slot: Slot, seq: int) -> bool:
        """True when the turn must be published (and record it as handed to Kafka)."""
        known = self.known.get(slot)
        if known is not None and seq <= known:
            return False
        if known is not None or self.tracking:
            self.known[slot] = seq
        if seq > self.unflushed.get(slot, 0):
            self.unflushed[slot] = seq
        return True

    def seal(self, end: int) -> None:
        """The turns admitted since the last seal are the records below offset ``end``:
        their marks wait for :meth:`take_marks` ``(through=end)`` (or later)."""
        if self.unflushed:
            self.sealed.append((end, self.unflushed))
            self.unflushed = {}

    def take_marks(self, through: int | None = None) -> dict[Slot, int]:
        """The marks to store with the next checkpoint (and forget them here).

        ``through``: only those sealed below that offset (what a commit covers);
        ``None``: every mark, sealed or not.
        """
        marks: dict[Slot, int] = {}
        sealed = self.sealed
        while sealed and (through is None or sealed[0][0] <= through):
            for slot, seq in sealed.popleft()[1].items():
                if seq > marks.get(slot, 0):
                    marks[slot] = seq
        if through is None:
            for slot, seq in self.unflushed.items():
                if seq > marks.get(slot, 0):
                    marks[slot] = seq
            self.unflushed = {}
        return marks


@dataclass(frozen=True)
class FlushPolicy:
    """When the records handed to the open batches are sent and checkpointed.

    A flush is due when the stream is idle (nothing more to read right now),
    or when ``batch_max`` records are pending or the oldest waited
    ``interval_s`` — but the last two wait while Kafka has not yet
    acknowledged everything sent before (``unacked``). Meanwhile the records
    keep filling the open per-partition batches (a full one is sent on its
    own), so a backlog leaves in a few large requests, about one per Kafka
    round trip, instead of many small batches queued behind the single
    request aiokafka keeps in flight per broker. An idle stream flushes at
    once, so a live turn is never held back.
    """

    batch_max: int
    interval_s: float

    def due(self, pending: int, oldest_age_s: float, *, idle: bool, unacked: bool) -> bool:
        if pending == 0:
            return False
        if idle:
            return True
        if unacked:
            return False
        return pending >= self.batch_max or oldest_age_s >= self.interval_s


@dataclass
class WatermarkClock:
    """Which watermark the watcher owes the turns topic, from its progress in the stream.

    A watermark ``W`` promises that every turn with ``created_at < W`` is
    already published (see :class:`~mongomem.models.Watermark`). It is sound
    when every turn reaches the change stream within ``lateness`` of its
    ``created_at`` (the writer's insert delay plus any skew between the
    writers' clocks and the watcher's), because the stream yields inserts in
    the order they were made:

    * **caught up** — a read that *started* at ``t`` came back empty, so every
      turn not yet read is inserted after ``t``: ``W = t - lateness``;
    * **behind** — every turn not yet read is inserted after the latest one
      read, whose ``created_at`` is ``c``: ``W = c - lateness`` (``c`` is the
      highest ``created_at`` read from the stream; back-fill scans are not in
      insert order and do not count).

    A watermark is due every ``interval_s`` (the caller's monotonic clock)
    when it is later than the last one issued; so watermarks never go back,
    and an outage of the watcher issues none — windowing then waits instead
    of mistaking the outage for idleness.

    Idle back-off (issue 28): each watermark issued with no turn read since the
    one before doubles the wait for the next, up to ``idle_interval_s``; a turn
    read brings it back to ``interval_s``. An idle pipeline then publishes about
    one watermark per partition every ``idle_interval_s`` instead of every
    ``interval_s``, and an idle window closes at most ``idle_interval_s`` after
    its due time (against an idle timeout of minutes) instead of ``interval_s``.
    """

    lateness: timedelta
    interval_s: float
    #: The longest wait between two watermarks while nothing is read (``None``: no
    #: back-off; never shorter than ``interval_s``).
    idle_interval_s: float | None = None
    issued: datetime | None = None
    issued_at_s: float | None = None
    latest_read: datetime | None = None
    #: Watermarks issued in a row with no turn read in between.
    quiet: int = 0
    _read_since_issue: bool = False

    def read(self, created_at: datetime) -> None:
        """A turn was read from the change stream (in insert order)."""
        if self.latest_read is None or created_at > self.latest_read:
            self.latest_read = created_at
        self._read_since_issue = True
        self.quiet = 0

    def wait_s(self) -> float:
        """How long after the last watermark the next one may be issued."""
        if self.idle_interval_s is None or self.quiet == 0:
            return self.interval_s
        longest = max(self.interval_s, self.idle_interval_s)
        return min(longest, self.interval_s * 2.0 ** min(self.quiet, 30))

    def due(self, now_s: float, caught_up_at: datetime | None) -> tuple[datetime, bool] | None:
        """The watermark to publish now, as ``(at, caught_up)``, or ``None``.

        ``caught_up_at``: when the latest empty read began (``None`` while the
        stream still has turns to read). A watermark returned is recorded as issued.
        """
        if self.issued_at_s is not None and now_s - self.issued_at_s < self.wait_s():
            return None
        base = caught_up_at if caught_up_at is not None else self.latest_read
        if base is None:
            return None
        at = base - self.lateness
        if self.issued is not None and at <= self.issued:
            return None
        if self.issued_at_s is not None:
            self.quiet = 0 if self._read_since_issue else self.quiet + 1
        self._read_since_issue = False
        self.issued, self.issued_at_s = at, now_s
        return at, caught_up_at is not None
