"""The Unicode rules of ids and labels (issue 25): NFC, no invisible characters, one
script per id; the same rule through the SDK's identity, the models and memory labels."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from mongomem.errors import InputError
from mongomem.identifiers import clean_label, invisible_character, mixed_scripts
from mongomem.ltm.kinds import kind_of
from mongomem.models import MemoryScope, check_identifier
from mongomem.sdk.identity import resolve_identity
from mongomem.sdk.models import MemoryRequestContext


def test_ids_are_nfc_so_two_spellings_of_one_letter_are_one_user() -> None:
    assert check_identifier("jose\u0301") == "jos\u00e9"
    assert MemoryScope(project_id="p", user_id="jose\u0301").user_id == "jos\u00e9"
    who = resolve_identity("p", MemoryRequestContext(user_id="jose\u0301"))
    assert who.user_id == "jos\u00e9"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("\u202ealice", "bidirectional control character (U+202E)"),
        ("ali\u2066ce", "bidirectional control character (U+2066)"),
        ("alice\u200b", "zero-width character (U+200B)"),
        ("al\u200dice", "zero-width character (U+200D)"),
        ("\ufeffalice", "zero-width character (U+FEFF)"),
        ("ali\u00adce", "invisible format character (U+00AD)"),
    ],
)
def test_invisible_characters_are_refused_naming_the_code_point(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        check_identifier(value)
    with pytest.raises(InputError) as caught:
        resolve_identity("p", MemoryRequestContext(user_id=value))
    assert caught.value.field == "user_id"
    with pytest.raises(InputError) as caught:
        resolve_identity("p", MemoryRequestContext(user_id="u", session_id=value))
    assert caught.value.field == "session_id"


@pytest.mark.parametrize(
    "value",
    ["\u0430lice", "p\u0430ypal", "\u03bfmega-o", "bob\u0431"],  # Cyrillic а, Greek ο, б
)
def test_an_id_mixing_scripts_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="must not mix scripts"):
        check_identifier(value)
    with pytest.raises(ValidationError, match="must not mix scripts"):
        MemoryScope(project_id=value)


@pytest.mark.parametrize(
    "value",
    [
        "alice",
        "\u0430\u043b\u0438\u0441\u0430",  # all Cyrillic
        "user-42_\u00e9t\u00e9",  # Latin with accents, digits, punctuation
        "\u5c71\u7530\u3055\u3093-tanaka",  # Han + Hiragana + Latin (Japanese)
        "\u30e6\u30fc\u30b6\u30fc",  # Katakana with the prolonged sound mark
        "\uae40\u6c11-kim",  # Hangul + Han + Latin (Korean)
        "\u03b1\u03b2\u03b3",  # all Greek
        "\uff41\uff4c\uff49\uff43\uff45",  # full-width Latin: visibly not "alice"
    ],
)
def test_one_script_or_a_cjk_mix_is_an_id(value: str) -> None:
    assert check_identifier(value) == value
    assert mixed_scripts(value) is None


def test_labels_are_nfc_and_refuse_invisible_characters_but_may_mix_scripts() -> None:
    semantic = kind_of("semantic")
    fields = semantic.check({"label": "cafe\u0301", "text": "t"}, strict=True)
    assert fields["label"] == "caf\u00e9"
    assert semantic.check({"label": "\u041c\u043e\u0441\u043a\u0432\u0430 airport", "text": "t"})
    with pytest.raises(InputError, match="U\\+202E") as caught:
        semantic.check({"label": "home\u202e", "text": "t"}, strict=True)
    assert caught.value.field == "label"
    # an extractor's output is not refused: what cannot be seen is dropped
    assert semantic.check({"label": "ho\u200bme", "text": "t"})["label"] == "home"
    assert clean_label("a\u200bb") == (
        "a\u200bb",
        "must not contain a zero-width character (U+200B)",
    )
    assert invisible_character("plain text") is None
