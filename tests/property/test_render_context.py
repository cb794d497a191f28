"""``build_context`` rendering stays within its budget and keeps the best items."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mongomem.sdk.models import ContextItem
from mongomem.sdk.render import render_context
from mongomem.stm.recall import RECALL_CLOSE, RECALL_OPEN, strip_recalled

TYPES = ["semantic", "episodic", "procedural", "taxonomic"]

items = st.lists(
    st.builds(
        ContextItem,
        memory_type=st.sampled_from(TYPES),
        memory_id=st.text(min_size=1, max_size=8),
        key=st.text(min_size=1, max_size=20),
        text=st.text(min_size=1, max_size=200),
        score=st.floats(-1, 1, allow_nan=False),
    ),
    max_size=30,
)


@given(items, st.lists(st.sampled_from(TYPES), min_size=1, unique=True), st.integers(1, 2000))
def test_within_budget_and_accounted_for(
    found: list[ContextItem], order: list[str], budget: int
) -> None:
    out = render_context("q", found, order, budget)
    assert len(out.text) <= budget
    considered = [i for i in found if i.memory_type in order]
    assert len(out.items) + out.omitted == len(considered)
    assert out.truncated == (out.omitted > 0)
    assert all(i.memory_type in order for i in out.items)


@given(items)
def test_a_large_budget_keeps_everything_best_first_per_section(found: list[ContextItem]) -> None:
    out = render_context("q", found, TYPES, 10**9)
    assert len(out.items) == len(found)
    for memory_type in TYPES:
        scores = [i.score for i in out.items if i.memory_type == memory_type]
        assert scores == sorted(scores, reverse=True)


PLAIN = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=60)


@given(items, PLAIN, PLAIN)
def test_recalled_context_is_marked_and_stripped_whole_from_any_turn(
    found: list[ContextItem], before: str, after: str
) -> None:
    out = render_context("q", found, TYPES, 10**9)
    if not out.items:
        assert out.text == ""
        return
    assert out.text.startswith(RECALL_OPEN + "\n")
    assert out.text.endswith("\n" + RECALL_CLOSE)
    assert strip_recalled(out.text) == ""
    pasted = strip_recalled(f"{before}\n{out.text}\n{after}")
    assert "mongomem:recalled" not in pasted
    assert pasted.split() == f"{before}\n{after}".split()  # the rest of the turn is kept
