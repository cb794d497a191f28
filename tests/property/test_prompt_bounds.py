"""The window budget of an extraction prompt (issue 24): bounded, longest cut first, no turn
dropped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mongomem.stages.extractor.core import fit_contents, render_conversation, shorten
from mongomem.testing import make_snapshot

texts = st.lists(st.text(min_size=0, max_size=400), min_size=1, max_size=12)


@given(texts, st.integers(min_value=200, max_value=3000))
def test_the_turns_fit_the_budget_and_none_is_dropped(contents: list[str], budget: int) -> None:
    fitted = fit_contents(contents, budget)
    assert len(fitted) == len(contents)  # every turn keeps its place
    assert sum(len(c) for c in fitted) <= budget or fitted == contents


@given(texts, st.integers(min_value=200, max_value=3000))
def test_a_turn_within_the_per_turn_limit_is_untouched(contents: list[str], budget: int) -> None:
    fitted = fit_contents(contents, budget)
    if fitted == contents:
        return
    limit = max(len(c) for c in fitted)
    for before, after in zip(contents, fitted, strict=True):
        if len(before) < limit:
            assert after == before  # the shorter turns are not cut: the longest go first
        else:
            assert len(after) <= len(before)


def test_what_fits_is_unchanged_and_a_cut_is_marked() -> None:
    assert fit_contents(["a", "b"], 10) == ["a", "b"]
    assert fit_contents(["a" * 50], None) == ["a" * 50]
    long = "start " + "x" * 2000 + " end"
    (cut,) = fit_contents([long], 300)
    assert len(cut) <= 300
    assert cut.startswith("start ")
    assert cut.endswith(" end")
    assert "characters cut" in cut
    assert shorten("short", 10) == "short"


def test_the_rendered_conversation_is_bounded() -> None:
    snapshot = make_snapshot([("user", "My home airport is Boston."), ("user", "z" * 20_000)])
    rendered = render_conversation(snapshot, max_chars=2000)
    assert len(rendered) < 2000 + 400  # the budget plus each line's JSON frame
    assert "My home airport is Boston." in rendered  # the short turn is whole
