"""Invariants of the pure reconciliation planner (SPEC D1, D3, F3)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.plan import (
    RECONCILE_ACTIONS,
    Neighbour,
    Thresholds,
    Verdict,
    memory_id_for,
    plan_reconcile,
)
from mongomem.models import Action, Evidence, MemoryCandidate, MemoryScope

AT = datetime(2026, 1, 1, tzinfo=UTC)
SCOPES = [
    MemoryScope(project_id="p1", user_id="u1"),
    MemoryScope(project_id="p1", user_id="u2"),
    MemoryScope(project_id="p2", user_id="u1"),
    MemoryScope(project_id="p1"),
]
TYPES = ["semantic", "episodic"]
KEYS = ["home-airport", "Home Airport", "seat", "diet"]
TEXTS = ["Boston.", "Denver.", "aisle seat", "vegan"]

scopes = st.sampled_from(SCOPES)
types = st.sampled_from(TYPES)
sims = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)


@st.composite
def candidates(draw: st.DrawFn) -> MemoryCandidate:
    return MemoryCandidate(
        candidate_id=f"cand_{draw(st.integers(0, 5))}",
        memory_type=draw(types),
        scope=draw(scopes),
        key=draw(st.sampled_from(KEYS)),
        fields={},
        text=draw(st.sampled_from(TEXTS)),
        embedding=(1.0,),
        evidence=Evidence(source="direct", ref="r", at=AT),
        created_at=AT,
    )


@st.composite
def neighbours(draw: st.DrawFn) -> list[Neighbour]:
    count = draw(st.integers(0, 6))
    out = []
    for i in range(count):
        out.append(
            Neighbour(
                memory_id=f"mem_{draw(st.integers(0, 4)) if i else 0}",
                version=draw(st.integers(1, 3)),
                memory_type=draw(types),
                scope=draw(scopes),
                key=draw(st.sampled_from(KEYS)),
                text=draw(st.sampled_from(TEXTS)),
                similarity=draw(sims),
            )
        )
    return out


def same_place(c: MemoryCandidate, n: Neighbour) -> bool:
    return n.scope == c.scope and n.memory_type == c.memory_type


def apply(
    c: MemoryCandidate, ns: list[Neighbour], decision_action: Action, mid: str
) -> list[Neighbour]:
    """What the store's state looks like to the planner after the decision."""
    if decision_action is Action.REINFORCE:
        return ns
    kept = [n for n in ns if n.memory_id != mid or not same_place(c, n)]
    version = max([n.version for n in ns if n.memory_id == mid and same_place(c, n)], default=0)
    new = Neighbour(
        memory_id=mid,
        version=version + 1,
        memory_type=c.memory_type,
        scope=c.scope,
        key=c.key,
        text=c.text,
        similarity=1.0,
    )
    return [*kept, new]


@given(candidates(), neighbours())
def test_order_of_neighbours_does_not_matter(c: MemoryCandidate, ns: list[Neighbour]) -> None:
    assert plan_reconcile(c, ns) == plan_reconcile(c, list(reversed(ns)))


@given(candidates(), neighbours())
def test_never_targets_another_scope_or_type(c: MemoryCandidate, ns: list[Neighbour]) -> None:
    d = plan_reconcile(c, ns)
    if d.action is Action.ADD:
        assert d.memory_id == memory_id_for(c.scope, c.memory_type, c.key)
    else:
        assert any(n.memory_id == d.memory_id and same_place(c, n) for n in ns)
    foreign = [n for n in ns if not same_place(c, n)]
    assert plan_reconcile(c, foreign).action is Action.ADD


@given(candidates(), neighbours())
def test_same_text_in_scope_reinforces(c: MemoryCandidate, ns: list[Neighbour]) -> None:
    twin = Neighbour(
        memory_id="mem_twin",
        version=1,
        memory_type=c.memory_type,
        scope=c.scope,
        key=c.key,
        text=c.text,
        similarity=0.2,
    )
    others = [n for n in ns if normalize_key(n.key) != normalize_key(c.key)]
    d = plan_reconcile(c, [*others, twin])
    assert (d.action, d.memory_id) == (Action.REINFORCE, "mem_twin")


@given(candidates(), neighbours())
def test_a_key_match_never_adds(c: MemoryCandidate, ns: list[Neighbour]) -> None:
    ns = list({n.memory_id: n for n in ns}.values())  # one version per memory
    d = plan_reconcile(c, ns)
    if any(same_place(c, n) and normalize_key(n.key) == normalize_key(c.key) for n in ns):
        assert d.action is not Action.ADD
        assert d.key_match


@given(candidates(), neighbours())
def test_replanning_after_apply_converges_to_reinforce(
    c: MemoryCandidate, ns: list[Neighbour]
) -> None:
    # Keep the state well-formed: one version per memory and one memory per key.
    state: dict[tuple[str, str], Neighbour] = {}
    for n in ns:
        state.setdefault((n.memory_id, normalize_key(n.key)), n)
    by_key: dict[tuple[MemoryScope, str, str], Neighbour] = {}
    for n in state.values():
        by_key.setdefault((n.scope, n.memory_type, normalize_key(n.key)), n)
    world = list({n.memory_id: n for n in by_key.values()}.values())
    first = plan_reconcile(c, world)
    after = apply(c, world, first.action, first.memory_id)
    second = plan_reconcile(c, after)
    assert second.action is Action.REINFORCE
    assert second.memory_id == first.memory_id
    assert apply(c, after, second.action, second.memory_id) == after


@given(candidates(), st.floats(0.0, 1.0), st.sampled_from(RECONCILE_ACTIONS), st.booleans())
def test_judge_asked_for_a_key_match_or_a_near_neighbour_and_only_for_its_target(
    c: MemoryCandidate, sim: float, said: Action, same_key: bool
) -> None:
    t = Thresholds(ambiguous_at=0.6)
    n = Neighbour(
        memory_id="mem_x",
        version=2,
        memory_type=c.memory_type,
        scope=c.scope,
        key=c.key if same_key else c.key + "-other",
        text=c.text + " (other)",
        similarity=sim,
    )
    bare = plan_reconcile(c, [n], t)
    assert bare.needs_judge == (same_key or sim >= 0.6)
    assert bare.action is (Action.UPDATE if same_key else Action.ADD)  # never REINFORCE
    judged = plan_reconcile(c, [n], t, Verdict(memory_id="mem_x", action=said, reason="r"))
    if bare.needs_judge:
        assert bare.ask_about == "mem_x"
        assert judged.judged
        allowed = said if not same_key or said is not Action.ADD else Action.UPDATE
        assert judged.action is allowed
    else:
        assert judged == bare
    stray = plan_reconcile(c, [n], t, Verdict(memory_id="mem_y", action=said, reason="r"))
    assert stray == bare


@given(candidates())
def test_same_key_lower_similarity_updates(c: MemoryCandidate) -> None:
    n = Neighbour(
        memory_id="mem_k",
        version=3,
        memory_type=c.memory_type,
        scope=c.scope,
        key=c.key.upper(),
        text="something else entirely",
        similarity=0.1,
    )
    d = plan_reconcile(c, [n])
    assert (d.action, d.memory_id, d.version, d.base_version) == (Action.UPDATE, "mem_k", 4, 3)


def test_a_judge_cannot_delete() -> None:
    with pytest.raises(ValueError, match="cannot decide DELETE"):
        Verdict(memory_id="mem_x", action=Action.DELETE, reason="r")


@given(candidates(), st.integers(1, 50))
def test_every_incarnation_of_a_key_has_its_own_memory_id(c: MemoryCandidate, n: int) -> None:
    ids = {memory_id_for(c.scope, c.memory_type, c.key, i) for i in range(n + 1)}
    assert len(ids) == n + 1
    assert memory_id_for(c.scope, c.memory_type, c.key, 0) == memory_id_for(
        c.scope, c.memory_type, c.key
    )
