"""Invariants of the extraction core, for any conversation text (Hypothesis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from mongomem.errors import LLMRateLimited
from mongomem.stages.extractor.core import (
    conversation_nonce,
    extracted_items,
    render_messages,
    to_candidates,
)
from mongomem.stages.extractor.types import builtin_spec
from mongomem.stages.runtime import RetryPolicy
from mongomem.testing import make_snapshot

MARKERS = st.sampled_from(
    ["<<<CONVERSATION ", "CONVERSATION ", ">>>", "\n", '"', "\\", "{", "}", "\u2028", "\r"]
)
CONTENT = st.lists(st.one_of(st.text(max_size=40), MARKERS), max_size=12).map("".join)
TURNS = st.lists(st.tuples(st.sampled_from(["user", "assistant"]), CONTENT), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(TURNS)
def test_every_conversation_stays_inside_one_block_verbatim(turns: list[tuple[str, str]]) -> None:
    snapshot = make_snapshot(turns)
    nonce = conversation_nonce(snapshot)
    _, user = render_messages(builtin_spec("semantic"), snapshot)
    text = user["content"]
    start, end = f"<<<CONVERSATION {nonce}\n", f"\nCONVERSATION {nonce}>>>"
    assert text.count(start) == 1
    assert text.count(end) == 1
    block = text.split(start, 1)[1].split(end, 1)[0]
    lines = block.split("\n") if block else []
    # turns with nothing in them (blank) are left out
    assert [json.loads(line)["content"] for line in lines] == [c for _, c in turns if c.strip()]


LABELS = st.text(alphabet="abcdefgh -_", min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(LABELS, st.text(min_size=1, max_size=30)), max_size=10))
def test_candidate_ids_are_unique_and_deterministic(pairs: list[tuple[str, str]]) -> None:
    spec = builtin_spec("semantic")
    snapshot = make_snapshot([("user", "x")])
    answer = spec.output_model.model_validate(
        {"items": [{"label": label, "fact": fact, "seqs": [1]} for label, fact in pairs]}
    )
    items = extracted_items(spec, answer, snapshot)
    keys = [i.key for i in items]
    assert len(keys) == len(set(keys))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    vectors = [[1.0]] * len(items)
    first = [
        c.candidate_id for c in to_candidates(spec, snapshot, items, vectors, model=None, now=now)
    ]
    again = [
        c.candidate_id for c in to_candidates(spec, snapshot, items, vectors, model=None, now=now)
    ]
    assert first == again
    assert len(set(first)) == len(first)


@given(
    st.integers(min_value=1, max_value=60),
    st.floats(min_value=0, max_value=120),
    st.floats(min_value=0, max_value=5),
    st.floats(min_value=0, max_value=60),
)
def test_backoff_is_bounded_and_honours_retry_after(
    attempt: int, retry_after: float, base: float, cap: float
) -> None:
    delay = RetryPolicy(base_s=base, cap_s=cap).delay(
        attempt, LLMRateLimited("x", retry_after=retry_after)
    )
    assert delay >= retry_after
    assert delay <= max(cap, retry_after)
