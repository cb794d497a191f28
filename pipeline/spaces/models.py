"""The records of memory spaces (SPEC H), as frozen pydantic models.

A :class:`Space` belongs to one project and is shared by every agent of that
project that names it (SPEC H1: several agents learn from each other's cases).
It fixes how items are matched (:class:`SearchKey` weights and
:class:`RecallSettings`), whether item payloads are encrypted, and which
agents override its keys. A :class:`SpaceItem` is one past case: named inputs,
outputs, outcome and feedback (episodic), or an escalation's inputs, chosen
outcome and resolution comment (escalation).

Caller input is checked by :func:`validated`, which turns pydantic's errors
into an :class:`~mongomem.errors.InputError` naming the field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from mongomem.errors import InputError
from mongomem.models import Frozen, check_identifier

__all__ = [
    "MAX_ARGUMENTS",
    "MAX_TEXT_CHARS",
    "AddResult",
    "ArgumentName",
    "EscalationDecision",
    "Feedback",
    "FeedbackView",
    "FileInput",
    "PlaygroundResult",
    "RecallHit",
    "RecallSettings",
    "RekeyResult",
    "SearchKey",
    "Sentiment",
    "Space",
    "SpaceItem",
    "SpaceKind",
    "SpaceUpdate",
    "check_argument",
    "validated",
]

#: Most input arguments one item (or one recall) may carry.
MAX_ARGUMENTS = 32
#: Longest single text (an input value, a file's text, a comment), in characters.
MAX_TEXT_CHARS = 200_000

Sentiment = Literal["positive", "negative", "neutral"]
SpaceKind = Literal["episodic", "escalation"]


_ARGUMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


def check_argument(value: str) -> str:
    """An input argument's name: a letter or ``_``, then letters, digits, ``_`` or ``-``
    (at most 64 characters), like a parameter name."""
    if not _ARGUMENT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an argument name (a letter or _, then letters, digits, _ or -; "
            "at most 64 characters)"
        )
    return value


ArgumentName = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"), AfterValidator(check_argument)
]
SpaceId = Annotated[str, AfterValidator(check_identifier)]


class SearchKey(Frozen):
    """One input argument that takes part in matching, and its weight."""

    argument: ArgumentName
    weight: float = Field(default=1.0, gt=0, le=100)


class RecallSettings(Frozen):
    """How a space matches new inputs to its items (SPEC H2, H4, H7).

    ``threshold`` applies to the final score (see :mod:`mongomem.spaces.scoring`);
    ``keyword_weight`` is the share of the keyword score in ``hybrid`` mode.
    """

    threshold: float = Field(default=0.7, ge=-1, le=1)
    top_k: int = Field(default=3, ge=1, le=50)
    mode: Literal["hybrid", "meaning"] = "hybrid"
    keyword_weight: float = Field(default=0.3, ge=0, le=1)
    duplicate_threshold: float = Field(default=0.9, ge=-1, le=1)
    long_text_chars: int = Field(default=4000, ge=200, le=MAX_TEXT_CHARS)


class FileInput(Frozen):
    """A file given as an input value: its text is summarised and the summary is the key."""

    name: str = Field(min_length=1, max_length=256)
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class Feedback(Frozen):
    """One piece of user feedback on an item (comment + sentiment), with when it was given."""

    comment: str = Field(default="", max_length=20_000)
    sentiment: Sentiment = "neutral"
    at: datetime
    by: str | None = Field(default=None, max_length=128)


class FeedbackView(Frozen):
    """One feedback entry as a feedback view shows it (with the item it is about)."""

    item_id: str
    comment: str
    sentiment: Sentiment
    at: datetime
    by: str | None = None


class Space(Frozen):
    """A space as stored: settings, keys, agents and (for inspection) its item count.

    ``key_id`` (encrypted spaces) is the fingerprint of the key all of its items
    are sealed under; while a key rotation runs, items carry their own.
    """

    project_id: str
    space_id: SpaceId
    name: str
    description: str = ""
    kind: SpaceKind
    encrypted: bool
    keys: tuple[SearchKey, ...]
    recall: RecallSettings
    agents: dict[str, tuple[SearchKey, ...] | None] = Field(default_factory=dict)
    embedder: str
    dimensions: int
    key_id: str | None = None
    created_at: datetime
    updated_at: datetime
    item_count: int = 0

    def keys_for(self, agent_id: str | None) -> tuple[SearchKey, ...]:
        """The agent's own keys if it overrides the space's, else the space's (SPEC H6)."""
        if agent_id is not None:
            override = self.agents.get(agent_id)
            if override:
                return override
        return self.keys


class SpaceItem(Frozen):
    """One past case. ``key_texts`` are the texts that were embedded, per argument
    (a file's summary, a long text's compressed form, or the value itself)."""

    item_id: str
    space_id: str
    kind: SpaceKind
    inputs: dict[str, Any]
    key_texts: dict[str, str]
    outputs: dict[str, Any] = Field(default_factory=dict)
    outcome: str | None = None
    resolution: str | None = None
    sentiment: Sentiment = "neutral"
    feedback: tuple[Feedback, ...] = ()
    source: dict[str, str] = Field(default_factory=dict)
    agent_id: str | None = None
    created_at: datetime
    updated_at: datetime


class RecallHit(Frozen):
    """An item and how well it matched: final ``score``, and its two parts."""

    item: SpaceItem
    score: float
    meaning: float
    keyword: float
    per_argument: dict[str, float]


class AddResult(Frozen):
    """What :meth:`~mongomem.spaces.AsyncSpaces.add_item` did.

    ``action`` is ``needs-choice`` when near-duplicates were found and the caller
    gave no ``on_duplicate``: nothing was stored, ``duplicates`` lists them.
    """

    action: Literal["added", "replaced", "merged", "needs-choice"]
    item: SpaceItem | None
    duplicates: tuple[RecallHit, ...] = ()
    removed: tuple[str, ...] = ()


class EscalationDecision(Frozen):
    """Apply a stored resolution, or raise the escalation (SPEC H7).

    ``top`` is the single best match, if any (only the top match is ever
    returned); ``outcome`` is set only when ``apply`` is true.
    """

    apply: bool
    outcome: str | None
    top: RecallHit | None
    threshold: float


class PlaygroundResult(Frozen):
    """A simulated recall (SPEC H8): what would match, what just missed, and for an
    escalation space, whether a past resolution would be applied."""

    space_id: str
    kind: SpaceKind
    matches: tuple[RecallHit, ...]
    near_misses: tuple[RecallHit, ...]
    escalation: EscalationDecision | None = None


class RekeyResult(Frozen):
    """What :meth:`~mongomem.spaces.AsyncSpaces.rekey_space` did: ``resealed`` items were
    sealed again under the current key, now the space's ``key_id``; the others already were."""

    space: Space
    resealed: int


class SpaceUpdate(Frozen):
    """The result of an edit. A key change that is not confirmed is not applied:
    ``applied`` is false and ``warning`` lists the agents it would affect."""

    space: Space
    applied: bool
    warning: str | None = None
    affected_agents: tuple[str, ...] = ()


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: dict[str, Any], *, prefix: str = "") -> M:
    """``model`` built from ``data``, or an :class:`InputError` naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        field = f"{prefix}.{where}" if prefix and where else (prefix or where or None)
        raise InputError(f"{field or model.__name__}: {first['msg']}", field=field) from exc
