"""The Unicode rules of identifiers and labels: one place, every surface (issue 25).

An id (project, user, session, service account, space, API-key project) and a
label (a memory's key fields: label, title, name, domain, term) are shown to
people — in the inspector, the logs, a CLI table — who cannot tell two strings
apart by looking. So, before anything else checks or stores them:

* **NFC.** Both are normalised to Unicode NFC: ``é`` typed as ``e`` + U+0301
  and ``é`` typed as U+00E9 are the same user. (Not NFKC: that would fold
  ``ﬁ`` into ``fi`` and full-width letters into ASCII, changing what people
  wrote; those are visibly different.)
* **No invisible characters.** A bidirectional control (U+202A–U+202E,
  U+2066–U+2069, U+200E, U+200F, U+061C), a zero-width character (U+200B–U+200D,
  U+2060, U+FEFF) or any other invisible format character (Unicode category
  ``Cf``, such as the soft hyphen) is refused, naming the code point:
  ``alice`` + U+200B would look like ``alice`` and be another user, and
  U+202E makes a string display reversed.
* **One script per id.** An id whose letters mix scripts is **refused**
  (UTS #39's "highly restrictive" profile: one script, or Latin with the
  scripts Japanese, Chinese or Korean text mixes — Han with Hiragana and
  Katakana, with Bopomofo, or with Hangul). ``аlice`` with a Cyrillic ``а``
  is refused rather than flagged: a flag would have to travel to every place
  an id is shown and every caller would still have to act on it, while an
  id that looks like another one is the handle for deleting or erasing the
  wrong person's memory. Digits, punctuation and marks belong to no script.
  Labels are natural language and may mix scripts (``Москва airport``).

:func:`check_identifier` (via :mod:`mongomem.models`) applies all three to ids;
:func:`clean_label` applies the first two to labels. The SDK, the HTTP service,
the MCP server, the CLI and import all reach ids through those models.
"""

from __future__ import annotations

import unicodedata

__all__ = ["clean_label", "invisible_character", "mixed_scripts", "nfc"]

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff")
#: Scripts a single id may combine with Latin (and each other), as Japanese, Chinese
#: and Korean text does (UTS #39, highly restrictive).
_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
_WIDTH_PREFIXES = ("FULLWIDTH ", "HALFWIDTH ")
#: Letters whose name does not start with their script's.
_ALIASES = {"FEMININE": "LATIN", "MASCULINE": "LATIN", "KATAKANA-HIRAGANA": None}


def nfc(value: str) -> str:
    """``value`` in Unicode NFC."""
    return unicodedata.normalize("NFC", value)


def invisible_character(value: str) -> str | None:
    """Why ``value`` is refused for an invisible character (the first), or ``None``."""
    for char in value:
        point = f"U+{ord(char):04X}"
        if char in _BIDI:
            return f"must not contain a bidirectional control character ({point})"
        if char in _ZERO_WIDTH:
            return f"must not contain a zero-width character ({point})"
        if unicodedata.category(char) in ("Cf", "Cs"):
            return f"must not contain an invisible format character ({point})"
    return None


def _script(char: str) -> str | None:
    """The script of a letter, from its Unicode name (``None``: not a letter, or no name)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    for prefix in _WIDTH_PREFIXES:
        name = name.removeprefix(prefix)
    if name.startswith(("CJK ", "IDEOGRAPHIC ")):
        return "HAN"
    if name.startswith("MODIFIER LETTER"):
        return None
    first = name.split(" ", 1)[0]
    return _ALIASES.get(first, first) or None


def mixed_scripts(value: str) -> str | None:
    """Why ``value`` is refused as an id that mixes scripts, or ``None`` (module doc)."""
    scripts = {s for s in map(_script, value) if s is not None}
    if len(scripts) <= 1 or any(scripts <= allowed for allowed in _MIXES):
        return None
    named = " and ".join(sorted(s.title() for s in scripts))
    return f"must not mix scripts ({named}): it could pass for another id"


def clean_label(value: str) -> tuple[str, str | None]:
    """A label in NFC, and why it is refused (an invisible character), or ``None``."""
    label = nfc(value)
    return label, invisible_character(label)
