"""The pure core of extraction: prompt in, candidates out, and the retry policy.

No I/O here. :func:`render_messages` turns a snapshot into chat messages in
which the conversation is delimited data — only the turns of the roles that
are extracted (``user`` and ``assistant`` unless a project opts in to more),
without the recalled context mongomem itself handed to the agent
(:func:`extractable_turns`, SPEC K3) — and, when given, the scope's
nearest known memories of the type, so the model reuses their labels
(:func:`known_within`, SPEC K2); :func:`to_candidates` turns the
validated items of the LLM's answer and their embeddings into
:class:`~mongomem.models.MemoryCandidate` events with deterministic ids.
Retries follow the stage runtime's :class:`~mongomem.stages.runtime.RetryPolicy`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from mongomem.models import (
    Evidence,
    MemoryCandidate,
    MemoryScope,
    Role,
    ScopeKind,
    Snapshot,
    SnapshotTurn,
)
from mongomem.stages.extractor.types import TypeSpec
from mongomem.stm.recall import strip_recalled

__all__ = [
    "DEFAULT_ROLES",
    "MAX_ITEMS",
    "Extracted",
    "Known",
    "conversation_nonce",
    "extractable_turns",
    "extracted_items",
    "known_within",
    "render_conversation",
    "render_messages",
    "scope_of",
    "snapshot_query",
    "to_candidates",
]

#: At most this many memories of one type from one snapshot (the rest are dropped).
MAX_ITEMS = 50
#: The roles whose turns are extracted unless a project opts in to more.
DEFAULT_ROLES: tuple[Role, ...] = (Role.USER, Role.ASSISTANT)


def extractable_turns(
    snapshot: Snapshot, roles: Sequence[Role] = DEFAULT_ROLES
) -> list[SnapshotTurn]:
    """The turns the model may learn from: of ``roles``, with recalled blocks removed,
    and not empty after that."""
    out = []
    for turn in snapshot.turns:
        if turn.role not in roles:
            continue
        content = strip_recalled(turn.content)
        if content.strip():
            out.append(
                turn if content == turn.content else turn.model_copy(update={"content": content})
            )
    return out


def conversation_nonce(snapshot: Snapshot) -> str:
    """A delimiter tag derived from the whole snapshot, so its turns cannot contain it."""
    digest = hashlib.sha256(snapshot.snapshot_id.encode())
    for turn in snapshot.turns:
        digest.update(b"\x00" + turn.content.encode())
    return digest.hexdigest()[:16]


#: What replaces the cut middle of a turn shortened to fit the window budget.
CUT_MARK = " […{} characters cut…] "


def shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its start (two thirds) and end (one third) kept,
    the middle replaced by :data:`CUT_MARK` naming how much was cut."""
    if len(text) <= limit:
        return text
    mark = CUT_MARK.format(len(text) - limit)
    if limit <= len(mark):  # too little room to say what was cut
        return text[:limit]
    keep = limit - len(mark)
    head = (keep * 2) // 3
    tail = keep - head
    return f"{text[:head]}{mark}{text[len(text) - tail :]}"


def fit_contents(contents: Sequence[str], max_chars: int | None) -> list[str]:
    """``contents`` within ``max_chars`` together: the longest are shortened first.

    The largest per-turn length ``L`` is found such that every turn cut to ``L``
    fits; turns shorter than ``L`` are untouched, longer ones are
    shortened to ``L`` (:func:`shorten`). Every turn keeps its place (none is dropped).
    """
    if max_chars is None or sum(len(c) for c in contents) <= max_chars:
        return list(contents)
    low, high = 0, max(len(c) for c in contents)
    while low < high:  # the largest limit that fits
        mid = (low + high + 1) // 2
        if sum(min(len(c), mid) for c in contents) <= max_chars:
            low = mid
        else:
            high = mid - 1
    return [shorten(c, low) for c in contents]


def render_conversation(
    snapshot: Snapshot, roles: Sequence[Role] = DEFAULT_ROLES, max_chars: int | None = None
) -> str:
    """One JSON object per extractable turn: quotes and newlines in the content are escaped.

    With ``max_chars``, the turns' contents together stay within it
    (:func:`fit_contents`: the longest turns are shortened first, their middle cut).
    """
    turns = extractable_turns(snapshot, roles)
    contents = fit_contents([t.content for t in turns], max_chars)
    return "\n".join(
        json.dumps(
            {
                "seq": t.seq,
                "role": t.role.value,
                "at": t.created_at.isoformat(),
                "content": content,
            },
            ensure_ascii=False,
        )
        for t, content in zip(turns, contents, strict=True)
    )


@dataclass(frozen=True)
class Known:
    """A memory of the type already stored in the snapshot's scope: its key and text."""

    key: str
    text: str


def scope_of(spec: TypeSpec, snapshot: Snapshot) -> MemoryScope:
    """The scope the snapshot's memories of ``spec``'s type live in."""
    return MemoryScope(
        project_id=snapshot.project_id,
        user_id=snapshot.user_id if spec.scope is ScopeKind.USER else None,
    )


def snapshot_query(
    snapshot: Snapshot, roles: Sequence[Role] = DEFAULT_ROLES, max_chars: int = 2000
) -> str:
    """The text embedded to find the known memories nearest to a snapshot (its last words)."""
    return "\n".join(t.content for t in extractable_turns(snapshot, roles))[-max_chars:]


def _known_line(memory: Known) -> str:
    return json.dumps({"key": memory.key, "text": memory.text}, ensure_ascii=False)


def known_within(known: Sequence[Known], max_chars: int) -> list[Known]:
    """The first of ``known`` (nearest first) whose lines fit in ``max_chars`` together."""
    out: list[Known] = []
    size = 0
    for memory in known:
        size += len(_known_line(memory)) + 1
        if size > max_chars:
            break
        out.append(memory)
    return out


def render_messages(
    spec: TypeSpec,
    snapshot: Snapshot,
    roles: Sequence[Role] = DEFAULT_ROLES,
    known: Sequence[Known] = (),
    max_chars: int | None = None,
) -> list[dict[str, str]]:
    """System message (rules + the type's instructions), the known memories (if any) and
    the delimited conversation (its turns' contents within ``max_chars``, see
    :func:`render_conversation`)."""
    nonce = conversation_nonce(snapshot)
    known_block = ""
    if known:
        lines = "\n".join(_known_line(m) for m in known)
        known_block = f"<<<KNOWN {nonce}\n{lines}\nKNOWN {nonce}>>>\n"
    user = (
        f"{known_block}"
        f"Conversation turns {snapshot.first_seq}–{snapshot.last_seq}, "
        f"closed at {snapshot.closed_at.isoformat()}.\n"
        f"<<<CONVERSATION {nonce}\n"
        f"{render_conversation(snapshot, roles, max_chars)}\n"
        f"CONVERSATION {nonce}>>>\n"
        f"Extract the {spec.name} memories from the conversation above, following the "
        "system instructions only."
    )
    return [
        {"role": "system", "content": spec.system_prompt(nonce)},
        {"role": "user", "content": user},
    ]


@dataclass(frozen=True)
class Extracted:
    """One normalised item: its key, fields and the text to embed."""

    key: str
    fields: dict[str, Any]
    text: str
    #: the key of a known memory the model says this item corrects (a hint, not a decision)
    corrects: str | None = None


def extracted_items(spec: TypeSpec, answer: BaseModel) -> list[Extracted]:
    """Normalise the answer's items, drop empty ones and repeated keys (first wins)."""
    raw_items: list[BaseModel] = list(getattr(answer, "items", []))
    out: list[Extracted] = []
    seen: set[str] = set()
    for item in raw_items:
        raw = item.model_dump(mode="json", by_alias=True)
        corrects = raw.pop("corrects", None)
        fields = spec.normalise(raw)
        key = spec.key_of(fields).strip()[:512]
        text = spec.text_of(fields).strip()
        if not key or not text or key in seen:
            continue
        seen.add(key)
        hint = corrects.strip()[:512] if isinstance(corrects, str) and corrects.strip() else None
        out.append(Extracted(key=key, fields=fields, text=text, corrects=hint))
        if len(out) >= MAX_ITEMS:
            break
    return out


def to_candidates(
    spec: TypeSpec,
    snapshot: Snapshot,
    items: Sequence[Extracted],
    vectors: Sequence[Sequence[float]],
    *,
    model: str | None,
    now: datetime,
) -> list[MemoryCandidate]:
    """Candidates with ids from (snapshot, type, prompt version, position)."""
    if len(items) != len(vectors):
        raise ValueError(f"{len(items)} items but {len(vectors)} embeddings")
    scope = scope_of(spec, snapshot)
    evidence = Evidence(
        source="snapshot",
        ref=snapshot.snapshot_id,
        session_id=snapshot.session_id,
        user_id=snapshot.user_id,
        at=snapshot.closed_at,
    )
    version = spec.full_prompt_version
    return [
        MemoryCandidate(
            candidate_id=MemoryCandidate.make_id(snapshot.snapshot_id, spec.name, version, pos),
            memory_type=spec.name,
            scope=scope,
            key=item.key,
            fields=item.fields,
            text=item.text,
            embedding=tuple(vector),
            evidence=evidence,
            prompt_version=version,
            model=model,
            corrects=item.corrects,
            created_at=now,
        )
        for pos, (item, vector) in enumerate(zip(items, vectors, strict=True))
    ]
