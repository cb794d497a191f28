"""Long-term memory: the reconciliation core, its MongoDB store, and search.

::

    kinds      the four built-in types: keys, fields, embedded text, scope
    plan       plan_reconcile(candidate, neighbours, thresholds) -> Decision  (pure)
    values     equivalent / value_changes: the deterministic value-change check (pure)
    judge      decide(): plan, ask the judge when the plan says so (protocol, LLM, double)
    index      per-scope float32 matrix cache for exact cosine search
    search     one interface: $vectorSearch where present, exact scan otherwise
    documents  MemoryVersion <-> stored document
    reads      get / search / list / history, always within one scope
    browse     filtered pages of versions with a cursor, and counts (SPEC J3)
    deletes    MemoryStore.delete: a DELETE version ends a memory's history (J1)
    store      MemoryStore.reconcile: idempotent, conflict-safe apply

Used by the reconciler stage (``stages/reconciler``) and by the SDK's direct
saves, so both reconcile the same way (SPEC E2).
"""

from __future__ import annotations

from mongomem.ltm.judge import Judge, JudgeQuestion, LLMJudge, ScriptedJudge
from mongomem.ltm.kinds import (
    KINDS,
    Kind,
    kind_of,
    make_candidate,
    normalize_key,
    normalize_text,
    scope_for,
)
from mongomem.ltm.plan import (
    Decision,
    Neighbour,
    Outcome,
    Score,
    Thresholds,
    Verdict,
    build_version,
    memory_id_for,
    plan_reconcile,
)
from mongomem.ltm.search import (
    AtlasVectorSearch,
    ExactCosineSearch,
    VectorSearch,
    probe_vector_search,
    vector_index_definition,
)
from mongomem.ltm.store import MemoryStore
from mongomem.ltm.values import equivalent, value_changes

__all__ = [
    "KINDS",
    "AtlasVectorSearch",
    "Decision",
    "ExactCosineSearch",
    "Judge",
    "JudgeQuestion",
    "Kind",
    "LLMJudge",
    "MemoryStore",
    "Neighbour",
    "Outcome",
    "Score",
    "ScriptedJudge",
    "Thresholds",
    "VectorSearch",
    "Verdict",
    "build_version",
    "equivalent",
    "kind_of",
    "make_candidate",
    "memory_id_for",
    "normalize_key",
    "normalize_text",
    "plan_reconcile",
    "probe_vector_search",
    "scope_for",
    "value_changes",
    "vector_index_definition",
]
