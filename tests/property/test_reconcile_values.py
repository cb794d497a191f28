"""K1: a changed number, date or negation is never a judge-less REINFORCE, whatever the similarity.

The statements are built from random plain words with one value slot; the
old and the new statement differ only in that slot (a number written in
digits or in words, a date, or a negation), and the existing memory is given
any similarity from -1 to 1, under the same key or another one.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from mongomem.ltm.plan import Neighbour, Thresholds, plan_reconcile
from mongomem.ltm.values import equivalent, normalized_tokens, value_changes
from mongomem.models import Action, Evidence, MemoryCandidate, MemoryScope

AT = datetime(2026, 1, 1, tzinfo=UTC)
ME = MemoryScope(project_id="p1", user_id="u1")


def _split(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _split(
    "user team garden project office car books plans keeps visits owns has meets reads "
    "travels booked studio bicycle violin lessons cousins flights tickets shelves rooms "
    "for at of in with and her his their every whole each"
)
UNITS = _split(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
)
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

words = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)


def spell(n: int) -> str:
    if n < 20:
        return UNITS[n]
    tens, unit = divmod(n, 10)
    return TENS[tens - 2] + ("" if unit == 0 else "-" + UNITS[unit])


@st.composite
def number(draw: st.DrawFn) -> tuple[float, str]:
    kind = draw(st.sampled_from(["digits", "words", "decimal", "thousands"]))
    if kind == "decimal":
        value = draw(st.integers(0, 9999)) / 100
        return value, f"{value:.2f}"
    if kind == "thousands":
        n = draw(st.integers(1000, 10**7))
        return n, f"{n:,}"
    n = draw(st.integers(0, 99))
    return n, spell(n) if kind == "words" else str(n)


@st.composite
def number_pair(draw: st.DrawFn) -> tuple[str, str]:
    old_value, old = draw(number())
    _new_value, new = draw(number().filter(lambda v: v[0] != old_value))
    return old, new


@st.composite
def date_pair(draw: st.DrawFn) -> tuple[str, str]:
    dates = st.dates(date(1990, 1, 1), date(2040, 12, 31))
    old = draw(dates)
    new = draw(dates.filter(lambda d: d != old))
    style = draw(st.sampled_from(["iso", "month"]))
    if style == "iso":
        return old.isoformat(), new.isoformat()
    if (old.month, old.day) == (new.month, new.day):  # only the year differs: a number
        return f"{old:%B} {old.day} {old.year}", f"{new:%B} {new.day} {new.year}"
    return f"{old:%B} {old.day}", f"{new:%B} {new.day}"


@st.composite
def negation_pair(draw: st.DrawFn) -> tuple[str, str]:
    verb = draw(st.sampled_from(["keeps", "visits", "owns", "reads", "likes"]))
    negated = draw(
        st.sampled_from(
            [
                f"does not {verb.rstrip('s')}",
                f"doesn't {verb.rstrip('s')}",
                f"never {verb}",
                f"no longer {verb}",
                f"not {verb}",
            ]
        )
    )
    pair = (verb, negated)
    return pair if draw(st.booleans()) else (pair[1], pair[0])


@st.composite
def changed_pair(draw: st.DrawFn) -> tuple[str, str]:
    before, after = draw(words), draw(words)
    old, new = draw(st.one_of(number_pair(), date_pair(), negation_pair()))
    cap = draw(st.sampled_from(["The user", "User", "the user's", ""]))
    end = draw(st.sampled_from([".", "", "!"]))
    return (
        f"{cap} {before} {old} {after}{end}".strip(),
        f"{cap} {before} {new} {after}{end}".strip(),
    )


def candidate(text: str, key: str) -> MemoryCandidate:
    return MemoryCandidate(
        candidate_id="cand_1",
        memory_type="semantic",
        scope=ME,
        key=key,
        fields={},
        text=text,
        embedding=(1.0,),
        evidence=Evidence(source="direct", ref="r", at=AT),
        created_at=AT,
    )


@settings(max_examples=400, deadline=None)
@given(
    changed_pair(),
    st.floats(-1.0, 1.0, allow_nan=False),
    st.booleans(),
    st.floats(-1.0, 1.0, allow_nan=False),
)
def test_a_changed_number_date_or_negation_is_never_a_judge_less_reinforce(
    pair: tuple[str, str], similarity: float, same_key: bool, ambiguous_at: float
) -> None:
    old, new = pair
    existing = Neighbour(
        memory_id="mem_1",
        version=1,
        memory_type="semantic",
        scope=ME,
        key="facts",
        text=old,
        similarity=similarity,
    )
    thresholds = Thresholds(ambiguous_at=max(ambiguous_at, 0.5))
    decision = plan_reconcile(
        candidate(new, "facts" if same_key else "other"), [existing], thresholds
    )
    assert decision.action is not Action.REINFORCE
    assert not equivalent(old, new)
    assert value_changes(old, new), (old, new)  # and the detector names the change
    assert decision.differences == value_changes(old, new)


@given(st.lists(st.sampled_from([*WORDS, "2", "two", "UTC+1", "not", "Boston"]), max_size=8))
def test_a_statement_is_equivalent_to_itself_in_other_case_and_punctuation(
    tokens: list[str],
) -> None:
    text = " ".join(tokens) or "x"
    variant = "  The " + text.upper() + " ."
    assert equivalent(text, text)
    assert normalized_tokens(text) == normalized_tokens(variant)
    assert equivalent(text, variant)
    assert not value_changes(text, text)
