"""Test helpers shipped with the package: build candidates without an extractor.

``candidate(...)`` makes a :class:`~mongomem.models.MemoryCandidate` of a
built-in type embedded by the :class:`~mongomem.adapters.embeddings.HashingEmbedder`
stand-in (not a model), as if extracted from ``snapshot`` (or written directly
when ``snapshot`` is ``None``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.ltm.kinds import kind_of, make_candidate, scope_for
from mongomem.models import Evidence, MemoryCandidate, stable_id, utcnow

__all__ = ["candidate"]

_EMBEDDER = HashingEmbedder(64)


def candidate(
    memory_type: str,
    *,
    project_id: str = "p1",
    user_id: str = "u1",
    snapshot: str | None = "snap-1",
    position: int = 0,
    at: datetime | None = None,
    embedder: HashingEmbedder = _EMBEDDER,
    **fields: Any,
) -> MemoryCandidate:
    kind = kind_of(memory_type)
    checked = kind.check(fields)
    when = at or utcnow()
    if snapshot is None:
        cid = stable_id("cand", "direct", memory_type, kind.key(checked), when.isoformat())
        evidence = Evidence(source="direct", ref=cid, text=kind.text(checked), at=when)
    else:
        cid = MemoryCandidate.make_id(snapshot, memory_type, "test", position)
        evidence = Evidence(
            source="snapshot", ref=snapshot, session_id="s1", text=kind.text(checked), at=when
        )
    return make_candidate(
        memory_type,
        scope_for(memory_type, project_id, user_id),
        checked,
        embedder.embed_one(kind.text(checked)),
        candidate_id=cid,
        evidence=evidence,
        created_at=when,
        prompt_version="test" if snapshot else "direct",
    )
