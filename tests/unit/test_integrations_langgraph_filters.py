"""The LangGraph store's filter and namespace matching agree with LangGraph's own store."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

langgraph_memory = pytest.importorskip("langgraph.store.memory")

from langgraph.store.base import MatchCondition  # noqa: E402

from mongomem.integrations.langgraph import matches, namespace_matches  # noqa: E402

scalars = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "1"]), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("xy"), inner),
    max_leaves=4,
)
ops = st.dictionaries(st.sampled_from(["$eq", "$ne", "$gt", "$lt"]), st.integers(-3, 3), min_size=1)


@given(value=values, wanted=st.one_of(values, ops))
def test_filters_match_as_in_langgraphs_in_memory_store(value: Any, wanted: Any) -> None:
    try:
        theirs = langgraph_memory._compare_values(value, wanted)
    except (TypeError, ValueError):
        return  # theirs raises on a non-number compared with $gt: ours says "no match"
    assert matches(value, wanted) == theirs


names = st.sampled_from(["u", "semantic", "*", "x"])


@given(
    namespace=st.lists(names.filter(lambda n: n != "*"), min_size=1, max_size=3).map(tuple),
    path=st.lists(names, max_size=3).map(tuple),
    kind=st.sampled_from(["prefix", "suffix"]),
)
def test_namespace_conditions_match_as_in_langgraphs_store(
    namespace: tuple[str, ...], path: tuple[str, ...], kind: Any
) -> None:
    condition = MatchCondition(kind, path)
    assert namespace_matches(condition, namespace) == langgraph_memory._does_match(
        condition, namespace
    )
