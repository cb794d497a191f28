"""A label a caller sends is at most 255 characters (issue 25: the document says so per
field, and a taxonomic ``domain/term`` key stays within its 512)."""

from __future__ import annotations

import pytest

from mongomem.errors import InputError
from mongomem.ltm.kinds import MAX_LABEL_CHARS, kind_of


def test_a_caller_s_label_over_255_characters_is_refused_naming_it() -> None:
    taxonomic = kind_of("taxonomic")
    fields = {"domain": "d" * MAX_LABEL_CHARS, "term": "t" * MAX_LABEL_CHARS, "definition": "x"}
    assert taxonomic.check(fields, strict=True)["term"] == "t" * MAX_LABEL_CHARS
    with pytest.raises(InputError) as refused:
        taxonomic.check({**fields, "term": "t" * (MAX_LABEL_CHARS + 1)}, strict=True)
    assert refused.value.field == "term"
    semantic = kind_of("semantic")
    with pytest.raises(InputError) as long_label:
        semantic.check({"label": "l" * 300, "text": "x"}, strict=True)
    assert long_label.value.field == "label"


def test_an_extractor_s_label_keeps_the_key_limit_only() -> None:
    """Not strict (an extractor's item): up to the key's 512, as before."""
    assert kind_of("semantic").check({"label": "l" * 300, "text": "x"})["label"] == "l" * 300
