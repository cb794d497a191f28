"""A text field's "not blank" pattern means one thing in every regex engine (contract).

``\\S`` does not: JSON Schema (ECMA-262) counts U+0085 as a character and U+FEFF as
space, pydantic (Rust) the other way round, so the fuzzer sent a query of one U+0085
that the document allowed and the service refused (422)."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from mongomem.models import NOT_BLANK
from mongomem.sdk.wire import BuildContextRequest, SearchTurnsRequest

WHO = {"project_id": "p", "user_id": "u"}
#: Every character the service strips (``str.isspace``), and U+FEFF (JSON Schema's space).
SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace()) + "\ufeff"


@pytest.mark.parametrize("blank", [*SPACES, "\u0085\ufeff ", "\x1e"])
def test_a_blank_query_is_refused_by_the_model_and_by_the_documented_pattern(
    blank: str,
) -> None:
    assert re.search(NOT_BLANK, blank) is None  # what a client's engine decides
    with pytest.raises(ValidationError) as refused:
        SearchTurnsRequest.model_validate({**WHO, "query": blank})
    assert [e["loc"] for e in refused.value.errors()] == [("query",)]


@pytest.mark.parametrize("text", ["a", " x ", "\u0085é", "\ufeff1"])
def test_text_with_a_character_is_accepted_by_both(text: str) -> None:
    assert re.search(NOT_BLANK, text) is not None
    assert SearchTurnsRequest.model_validate({**WHO, "query": text}).query == text


def test_the_documented_query_patterns_are_the_listed_class() -> None:
    for model in (BuildContextRequest, SearchTurnsRequest):
        schema = model.model_json_schema()["properties"]["query"]
        assert schema["pattern"] == NOT_BLANK
        assert "\\S" not in schema["pattern"]


def test_a_json_true_is_no_min_score() -> None:
    """It was taken as 1.0 (pydantic's lax float), which the document does not allow."""
    with pytest.raises(ValidationError) as refused:
        BuildContextRequest.model_validate_json(
            json.dumps({**WHO, "query": "q", "min_score": True})
        )
    assert [e["loc"] for e in refused.value.errors()] == [("min_score",)]
    one = BuildContextRequest.model_validate_json(json.dumps({**WHO, "query": "q", "min_score": 1}))
    assert one.min_score == 1
