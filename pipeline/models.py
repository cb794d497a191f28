"""Events and records of the pipeline, as frozen pydantic models.

``Turn`` → (windowing) → ``Snapshot`` → (extraction) → ``MemoryCandidate`` →
(reconciliation) → ``MemoryVersion``. Every id that a stage derives is
deterministic, so that reprocessing the same input yields the same output and
MongoDB upserts on those ids are idempotent. Encoding to and from Kafka bytes
lives in :mod:`mongomem.codec`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from mongomem.buckets import in_share
from mongomem.identifiers import invisible_character, mixed_scripts, nfc

__all__ = [
    "BUILTIN_MEMORY_TYPES",
    "CLOSED_STATUSES",
    "MAX_JSON_DEPTH",
    "MAX_SPEAKER",
    "NOT_BLANK",
    "Action",
    "EventTime",
    "Evidence",
    "Frozen",
    "Identifier",
    "MemoryCandidate",
    "MemoryScope",
    "MemoryStatus",
    "MemoryType",
    "MemoryVersion",
    "Role",
    "ScopeKind",
    "SessionEnd",
    "SessionKey",
    "Snapshot",
    "SnapshotTurn",
    "Speaker",
    "Turn",
    "Watermark",
    "ceil_millisecond",
    "check_identifier",
    "check_speaker",
    "check_valid_range",
    "json_depth",
    "session_kafka_key",
    "stable_id",
    "utcnow",
]


_CONTROL = re.compile("[\x00-\x1f\x7f]")
_SPEAKER_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

#: How deep a caller's JSON (turn metadata, a space item's outputs) may nest.
MAX_JSON_DEPTH = 32

#: A text field's pattern "not blank": one character that is not white space. The
#: characters are listed, since ``\S`` means another set in each engine: JSON Schema's
#: (ECMA-262) counts U+FEFF and not U+0085, pydantic's (Rust) the other way round, so a
#: client and the service disagreed on a query of one U+0085. Both count as space here,
#: as does every character Python's ``str.strip()`` removes (U+001C–U+001F too: a query
#: of one U+001E fit the document and was then stripped to nothing by the service).
NOT_BLANK = (
    "[^\\t\\n\\v\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029"
    "\\u202f\\u205f\\u3000\\ufeff]"
)


def json_depth(value: object) -> int:
    """How deep ``value`` nests (a scalar is 0, ``[1]`` is 1), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def check_identifier(value: str) -> str:
    """Return ``value`` in NFC if it is a valid id, else raise ``ValueError`` saying why.

    Ids are 1–128 characters with no control characters (NUL included), no
    leading ``$``, no leading/trailing ``.`` or ``..`` runs, and no whitespace
    at either end; and, as :mod:`mongomem.identifiers` says why, no invisible
    character (bidirectional controls, zero-width characters) and letters of
    one script. This is the one rule of every surface (SDK, HTTP, MCP, CLI, import).
    """
    value = nfc(value)
    if not value:
        raise ValueError("must not be empty")
    if len(value) > 128:
        raise ValueError("must be at most 128 characters")
    if value != value.strip():
        raise ValueError("must not start or end with whitespace")
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    if value.startswith("$"):
        raise ValueError("must not start with '$'")
    if value.startswith(".") or value.endswith(".") or ".." in value:
        raise ValueError("must not start or end with '.' or contain '..'")
    why = invisible_character(value) or mixed_scripts(value)
    if why is not None:
        raise ValueError(why)
    return value


Identifier = Annotated[str, AfterValidator(check_identifier)]

#: How long a turn's ``speaker`` (a display name or participant id) may be.
MAX_SPEAKER = 128


def check_speaker(value: str) -> str:
    """Return ``value`` if it is a valid speaker name, else raise ``ValueError`` saying why.

    A speaker is 1–128 characters, not blank, with no control characters — C0 and
    C1 alike (newlines included, and U+0085: the name is shown to the model inside
    the conversation) — and no invisible or bidirectional format character
    (:func:`~mongomem.identifiers.invisible_character`: a name must read as it is).
    """
    if not value.strip():
        raise ValueError("must not be empty or blank")
    if len(value) > MAX_SPEAKER:
        raise ValueError(f"must be at most {MAX_SPEAKER} characters")
    if _SPEAKER_CONTROL.search(value):
        raise ValueError("must not contain control characters")
    why = invisible_character(value)
    if why is not None:
        raise ValueError(why)
    return value


Speaker = Annotated[str, AfterValidator(check_speaker)]


def check_valid_range(valid_from: date | None, valid_to: date | None) -> None:
    """Raise ``ValueError`` if an event-time range ends before it starts."""
    if valid_from is not None and valid_to is not None and valid_to < valid_from:
        raise ValueError(
            f"valid_to {valid_to.isoformat()} is before valid_from {valid_from.isoformat()}"
        )


def utcnow() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def ceil_millisecond(at: datetime) -> datetime:
    """``at`` rounded *up* to the millisecond, the precision MongoDB keeps.

    A time stored as written would be cut down to its millisecond and could then
    read as earlier than a moment taken after it (a direct save's evidence time
    against a later ``as_of``, SPEC L5); rounded up it never does."""
    cut = at.replace(microsecond=at.microsecond // 1000 * 1000)
    return cut if cut == at else cut + timedelta(milliseconds=1)


def stable_id(prefix: str, *parts: object) -> str:
    """A deterministic id: ``prefix_`` + 24 hex digits of SHA-256 over the parts.

    Parts are joined with NUL, which no identifier may contain, so different
    tuples never collide by concatenation.
    """
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}_{digest[:24]}"


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MemoryType(StrEnum):
    """The built-in memory types. Custom types are plain names (see project config)."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"
    TAXONOMIC = "taxonomic"


BUILTIN_MEMORY_TYPES: tuple[str, ...] = tuple(t.value for t in MemoryType)


class ScopeKind(StrEnum):
    USER = "user"  # (project, user)
    PROJECT = "project"  # shared by every user of the project


class Frozen(BaseModel):
    """The base of every value model: immutable, and unknown fields are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def session_kafka_key(project_id: str, user_id: str, session_id: str) -> bytes:
    """The Kafka key of a session's records (turns, snapshots): its ids, NUL-joined."""
    return "\x00".join((project_id, user_id, session_id)).encode()


class SessionKey(Frozen):
    """Who is talking where: the partitioning key of turns and snapshots."""

    project_id: Identifier
    user_id: Identifier
    session_id: Identifier

    def kafka_key(self) -> bytes:
        return session_kafka_key(self.project_id, self.user_id, self.session_id)


class Turn(Frozen):
    """One message of a conversation, as stored in ``turns`` and sent on Kafka."""

    turn_id: str
    project_id: Identifier
    user_id: Identifier
    session_id: Identifier
    seq: int = Field(ge=1)
    role: Role
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: AwareDatetime
    #: Who spoke (a display name or participant id) besides the role (SPEC L3); ``None``
    #: when not given. Left out of the encoding when ``None``.
    speaker: Speaker | None = Field(default=None, exclude_if=lambda v: v is None)
    #: When a turn recorded with its own past time (``record_turn(..., at=)``,
    #: SPEC J7) was written; ``None`` for a turn recorded live, whose
    #: ``created_at`` is that time. Left out of the encoding when ``None``.
    recorded_at: AwareDatetime | None = Field(default=None, exclude_if=lambda v: v is None)

    @staticmethod
    def make_id(project_id: str, user_id: str, session_id: str, seq: int) -> str:
        return stable_id("turn", project_id, user_id, session_id, seq)

    @property
    def arrived_at(self) -> datetime:
        """When the turn reached mongomem (wall clock): ``recorded_at``, else ``created_at``."""
        return self.recorded_at or self.created_at

    @model_validator(mode="after")
    def _id_matches(self) -> Turn:
        if self.turn_id != Turn.make_id(self.project_id, self.user_id, self.session_id, self.seq):
            raise ValueError("turn_id does not match (project, user, session, seq)")
        return self

    @property
    def session(self) -> SessionKey:
        return SessionKey(
            project_id=self.project_id, user_id=self.user_id, session_id=self.session_id
        )


class SessionEnd(Frozen):
    """``end_session``: the session's open window closes here, at once.

    Not a turn, but an event *in the turns stream*: it is stored in ``turns``
    at the session's next seq (allocated exactly like a turn's, so it is
    ordered with the session's turns, back-filled and replayed with them),
    and the watcher publishes it to the session's partition. ``seq_id`` is
    ``Turn.make_id`` of that seq (the document's ``_id``). Readers of turns
    (recent turns, sessions, extraction) never see it as one.
    """

    seq_id: str
    project_id: Identifier
    user_id: Identifier
    session_id: Identifier
    seq: int = Field(ge=1)
    created_at: AwareDatetime

    @model_validator(mode="after")
    def _id_matches(self) -> SessionEnd:
        if self.seq_id != Turn.make_id(self.project_id, self.user_id, self.session_id, self.seq):
            raise ValueError("seq_id does not match (project, user, session, seq)")
        return self

    @property
    def session(self) -> SessionKey:
        return SessionKey(
            project_id=self.project_id, user_id=self.user_id, session_id=self.session_id
        )


class Watermark(Frozen):
    """The watcher's in-band promise about one partition of the turns topic.

    Every turn whose ``created_at`` is before ``at`` has been published into
    this partition ahead of this record — a turn written later than that
    exceeded the watcher's allowed lateness (see
    :mod:`mongomem.stages.watcher`). ``caught_up`` says where ``at`` came
    from: the watcher had read everything the change stream held (its clock
    at that read, less the lateness), or it was behind (the latest turn time
    it had read, less the lateness). Windowing closes idle windows only on
    these; they are part of the log, so a replay closes the same windows.
    A turn recorded with its own past time (historical import) is the one
    exception to the promise: windowing measures idleness for it from when it
    was written (``recorded_at``), not from ``created_at``.

    ``share`` of ``shares``: the watcher that made it reads only the sessions
    whose bucket (:func:`~mongomem.buckets.session_bucket`) is ``share`` modulo
    ``shares``, so the promise covers those sessions alone; windowing applies it
    to no other (records without the fields come from a single watcher: 0 of 1).
    """

    at: AwareDatetime
    caught_up: bool
    share: int = Field(default=0, ge=0)
    shares: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _share_in_range(self) -> Watermark:
        if self.share >= self.shares:
            raise ValueError(f"watermark share {self.share} is not in [0, {self.shares})")
        return self

    def covers(self, project_id: str, user_id: str, session_id: str) -> bool:
        """Does this watermark's promise cover the session (is it in the watcher's share)?"""
        return in_share(project_id, user_id, session_id, self.share, self.shares)


class SnapshotTurn(Frozen):
    """A turn as carried inside a snapshot."""

    turn_id: str
    seq: int = Field(ge=1)
    role: Role
    content: str
    created_at: AwareDatetime
    #: Who spoke, when the turn says (SPEC L3); left out of the encoding when ``None``.
    speaker: Speaker | None = Field(default=None, exclude_if=lambda v: v is None)


class Snapshot(Frozen):
    """One contiguous run of one session's turns, promoted together."""

    snapshot_id: str
    project_id: Identifier
    user_id: Identifier
    session_id: Identifier
    first_seq: int = Field(ge=1)
    last_seq: int = Field(ge=1)
    turns: tuple[SnapshotTurn, ...] = Field(min_length=1)
    reason: Literal["count", "idle", "gap", "end"]
    closed_at: AwareDatetime

    @staticmethod
    def make_id(session: SessionKey, first_seq: int, last_seq: int) -> str:
        return stable_id(
            "snap", session.project_id, session.user_id, session.session_id, first_seq, last_seq
        )

    @model_validator(mode="after")
    def _consistent(self) -> Snapshot:
        seqs = [t.seq for t in self.turns]
        if seqs != sorted(set(seqs)):
            raise ValueError("turns must be in strictly increasing seq order")
        if seqs[0] != self.first_seq or seqs[-1] != self.last_seq:
            raise ValueError("first_seq/last_seq must match the turns")
        expected = stable_id(
            "snap", self.project_id, self.user_id, self.session_id, self.first_seq, self.last_seq
        )
        if self.snapshot_id != expected:
            raise ValueError("snapshot_id does not match (session, first_seq, last_seq)")
        return self

    @property
    def session(self) -> SessionKey:
        return SessionKey(
            project_id=self.project_id, user_id=self.user_id, session_id=self.session_id
        )

    @property
    def observed_at(self) -> datetime:
        """When the snapshot's turns were said: the latest of their own times (SPEC L1).

        Never ``closed_at``, which is stream time (an idle close is stamped at
        the end of the idle timeout)."""
        return max(t.created_at for t in self.turns)


class MemoryScope(Frozen):
    """Where a memory lives: (project, user) or the whole project."""

    project_id: Identifier
    user_id: Identifier | None = None

    @property
    def kind(self) -> ScopeKind:
        return ScopeKind.PROJECT if self.user_id is None else ScopeKind.USER

    def kafka_key(self) -> bytes:
        return "\x00".join((self.project_id, self.user_id or "")).encode()


class Evidence(Frozen):
    """Where a memory was learned or confirmed."""

    source: Literal["snapshot", "direct"]
    ref: str  # snapshot id, or the candidate id of a direct write
    session_id: str | None = None
    #: Whose turns (or call) it came from: how an erasure finds a user's evidence in a
    #: project-scoped memory (``None`` on evidence written before it was recorded).
    user_id: str | None = None
    text: str | None = None
    #: When the evidence was said (SPEC L1): the latest own time of the turns it cites
    #: (never when it was processed), or the time of a direct write.
    at: AwareDatetime
    #: The seqs of the snapshot's turns the item cites (SPEC L4); empty for a direct
    #: write and for evidence recorded before citations existed.
    seqs: tuple[int, ...] = ()


class EventTime(Frozen):
    """When a fact holds or an event happened, as the conversation says it (SPEC L1).

    ``valid_from``/``valid_to`` are calendar dates (a single day has both
    equal; an open range leaves one out); ``phrase`` is the words the
    conversation used ("last May", "yesterday"), kept beside the resolved dates.
    """

    valid_from: date | None = None
    valid_to: date | None = None
    phrase: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _ordered(self) -> EventTime:
        check_valid_range(self.valid_from, self.valid_to)
        return self

    @property
    def empty(self) -> bool:
        return self.valid_from is None and self.valid_to is None and self.phrase is None

    def describe(self) -> str:
        """``2023-05-01..2023-05-31 ("last May")``, ``2023-05-07``, ``from 2020-01-01``."""
        lo, hi = self.valid_from, self.valid_to
        if lo is not None and hi is not None:
            text = lo.isoformat() if lo == hi else f"{lo.isoformat()}..{hi.isoformat()}"
        elif lo is not None:
            text = f"from {lo.isoformat()}"
        elif hi is not None:
            text = f"until {hi.isoformat()}"
        else:
            text = ""
        if self.phrase:
            text = f'{text} ("{self.phrase}")' if text else f'"{self.phrase}"'
        return text


class MemoryCandidate(Frozen):
    """A memory extracted from one snapshot (or written directly), before reconciliation.

    ``key`` is the natural key of the type (label, title, procedure name,
    ``domain/term``); ``fields`` holds the type's structured fields; ``text``
    is what was embedded.
    """

    candidate_id: str
    memory_type: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    scope: MemoryScope
    key: str = Field(min_length=1, max_length=512)
    fields: dict[str, Any]
    text: str = Field(min_length=1)
    embedding: tuple[float, ...] = Field(min_length=1)
    evidence: Evidence
    prompt_version: str = "direct"
    model: str | None = None
    #: The key of a known memory the extraction model said this statement corrects: a
    #: hint shown to the judge and kept in the decision log, never a decision (SPEC K2).
    corrects: str | None = Field(default=None, max_length=512)
    #: Whom the memory is about (SPEC L3): ``None`` is the scope's user; else a named
    #: participant or third party. Left out of the encoding when ``None``.
    subject: str | None = Field(default=None, max_length=200, exclude_if=lambda v: v is None)
    #: When it holds or happened, where the conversation says so (SPEC L1).
    event: EventTime | None = Field(default=None, exclude_if=lambda v: v is None)
    created_at: AwareDatetime

    @staticmethod
    def make_id(snapshot_id: str, memory_type: str, prompt_version: str, position: int) -> str:
        return stable_id("cand", snapshot_id, memory_type, prompt_version, position)


class Action(StrEnum):
    """What wrote a version: the reconciler's three actions, a deletion (SPEC J1), or
    the expiry of a memory not reinforced within its type's retention (J8)."""

    ADD = "ADD"
    UPDATE = "UPDATE"
    REINFORCE = "REINFORCE"
    DELETE = "DELETE"
    EXPIRE = "EXPIRE"


class MemoryStatus(StrEnum):
    """``current`` (what reads return), ``superseded`` (an older version),
    ``deleted`` (the DELETE version that closes a deleted memory's history) or
    ``expired`` (the EXPIRE version that closes an expired one's, the same way)."""

    CURRENT = "current"
    SUPERSEDED = "superseded"
    DELETED = "deleted"
    EXPIRED = "expired"


#: The statuses of a version that closes a memory's history (no version is current after).
CLOSED_STATUSES: frozenset[str] = frozenset({MemoryStatus.DELETED, MemoryStatus.EXPIRED})


class MemoryVersion(Frozen):
    """One version of one long-term memory, as stored in ``memories``.

    ``memory_id`` is stable across versions; ``version_id`` is
    ``stable_id(memory_id, version)``. Exactly one version of a memory is
    ``current`` — none once the memory is deleted: its last version is then
    the ``DELETE`` version (status ``deleted``), which records the time
    (``created_at``), ``actor`` and ``reason`` of the deletion; or once it
    expired: an ``EXPIRE`` version (status ``expired``) does the same.
    """

    version_id: str
    memory_id: str
    version: int = Field(ge=1)
    memory_type: str
    scope: MemoryScope
    key: str
    fields: dict[str, Any]
    text: str
    embedding: tuple[float, ...]
    status: MemoryStatus
    action: Action
    reinforcement_count: int = Field(ge=1)
    evidence: tuple[Evidence, ...]
    created_at: AwareDatetime
    updated_at: AwareDatetime
    superseded_at: AwareDatetime | None = None
    superseded_by: str | None = None
    reason: str | None = None
    actor: str | None = None
    #: When the evidence of this version's value was said (SPEC L1): the latest time of
    #: its evidence; ``None`` on versions written before it was recorded (then read as
    #: the latest ``evidence.at``, :attr:`evidence_time`).
    observed_at: AwareDatetime | None = None
    #: Whom it is about (``None``: the scope's user) and when it holds (SPEC L1, L3).
    subject: str | None = None
    event: EventTime | None = None

    @property
    def evidence_time(self) -> datetime:
        """When this version's value was last said: ``observed_at``, else the latest
        evidence time, else ``created_at``."""
        if self.observed_at is not None:
            return self.observed_at
        return max((e.at for e in self.evidence), default=self.created_at)

    @staticmethod
    def make_version_id(memory_id: str, version: int) -> str:
        return stable_id("ver", memory_id, version)
