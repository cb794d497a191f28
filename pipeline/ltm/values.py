"""Deterministic checks of whether two statements say the same value (SPEC K1).

The reconciler must never keep a changed value stale on similarity alone: an
embedding scores "The user has two children." and "The user has three
children." as high as two paraphrases. Two pure functions decide instead:

:func:`equivalent`
    ``True`` only when the two statements are the *same words in the same
    order* after a value-preserving normalisation (case, punctuation,
    whitespace, the articles *the/a/an* and the copulas *is/are/am* dropped,
    possessive ``'s`` dropped, ``n't`` spelled ``not``, number words written as
    digits: "two" → ``2``, "twenty-five" → ``25``, "1,000" → ``1000``,
    "3.50" → ``3.5``) **and** :func:`value_changes` finds nothing. It is the
    only ground on which a REINFORCE may be decided without the judge. Any
    changed word — a colour, a city written in lower case, a swapped role —
    makes two statements non-equivalent, so the check errs towards asking.

:func:`value_changes`
    The differences between the *values* the two statements carry, each as a
    short readable string (``"number: 2 → 3"``, ``"negation: only in new"``):

    * numbers (digits and number words, ordinals, decimals, "a dozen");
    * dates (ISO and slashed dates, month and weekday names, today/tomorrow …);
    * times of day ("9 am", "21:30") and time zones ("UTC+1", "GMT-5", "CET");
    * quantities: a number with its unit ("5 km" vs "5 miles", "$20" vs "€20");
    * negation: a different count of *not/no/never/without/no longer/stopped …*;
    * named entities: capitalised words (other than a sentence's usual first
      words such as *The*, *User*, *I*) and quoted strings, compared case-folded;
    * antonym-like swaps from a fixed list (:data:`SWAP_GROUPS`): window/aisle,
      vegetarian/vegan, morning/evening, colours, seasons, …

    The reconciler uses them as evidence — shown to the judge and written to
    the decision log — never to decide REINFORCE.

**Where it stops.** It knows no synonyms or paraphrases (those go to the
judge, which is the point); it does not convert units (5 km vs 5000 m is a
change) or resolve relative dates ("next Monday" is the word, not a date);
entities written in lower case and antonyms missing from the list are not
*named* as a value change — but they still make :func:`equivalent` false,
because that check compares every word. Languages other than English are
compared word for word only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from mongomem.number_words import CARDINALS

__all__ = ["SWAP_GROUPS", "Values", "equivalent", "normalized_tokens", "value_changes", "values_of"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_UNITS_WORDS = {**CARDINALS, "dozen": 12, "once": 1, "twice": 2}
_TENS_WORDS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "thousand": 1000,
    "million": 1_000_000,
}
_ORDINAL_WORDS = {
    "first": "1st",
    "second": "2nd",
    "third": "3rd",
    "fourth": "4th",
    "fifth": "5th",
    "sixth": "6th",
    "seventh": "7th",
    "eighth": "8th",
    "ninth": "9th",
    "tenth": "10th",
}
_MONTHS = _words(
    "january february march april may june july august september october november "
    "december jan feb mar apr jun jul aug sep sept oct nov dec"
)
_WEEKDAYS = _words(
    "monday tuesday wednesday thursday friday saturday sunday weekday weekend weekends "
    "today tomorrow yesterday tonight"
)
_ZONES = _words(
    "utc gmt cet cest eet eest wet west bst ist jst kst est edt cst cdt mst mdt pst pdt "
    "akst hst aest aedt nzst nzdt"
)
_UNITS = _words(
    "km kms kilometer kilometers kilometre kilometres mile miles m meter meters metre "
    "metres cm mm ft foot feet inch inches kg kgs kilo kilos kilogram kilograms g gram "
    "grams lb lbs pound pounds oz ounce ounces l liter liters litre litres ml gallon "
    "gallons % percent hour hours hr hrs h minute minutes min mins second seconds sec "
    "secs s day days week weeks month months year years yr yrs decade decades night "
    "nights times x euro euros eur dollar dollars usd gbp yen chf kb mb gb tb mbps gbps "
    "kcal calorie calories degree degrees celsius fahrenheit c f k"
)
_CURRENCY = {"$": "usd", "€": "eur", "£": "gbp", "¥": "yen"}
_NEGATIONS = (
    "not",
    "no",
    "never",
    "none",
    "nobody",
    "nothing",
    "neither",
    "nor",
    "without",
    "cannot",
    "stopped",
    "quit",
    "anymore",
    "formerly",
    "former",
    "longer",
)
#: Antonym-like alternatives: two statements that differ by a swap inside one group
#: state different values even when an embedding scores them as near-identical.
SWAP_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "window aisle middle",
        "vegetarian vegan pescatarian omnivore carnivore flexitarian",
        "morning afternoon evening night noon midnight",
        "left right",
        "early late",
        "before after",
        "first last",
        "yes no",
        "true false",
        "like likes liked dislike dislikes disliked love loves loved hate hates hated",
        "allow allows allowed forbid forbids forbidden ban banned",
        "enable enabled disable disabled",
        "always usually often sometimes rarely seldom never",
        "more less fewer",
        "increase increased decrease decreased",
        "minimum min maximum max",
        "higher lower",
        "above below",
        "male female",
        "married single divorced widowed engaged separated",
        "hot warm cold cool",
        "light dark",
        "small medium large",
        "cheap expensive",
        "economy business premium",
        "metric imperial",
        "tea coffee",
        "beer wine",
        "ascending descending",
        "open closed",
        "public private",
        "remote onsite hybrid",
        "daily weekly monthly yearly annually hourly",
        "tabs spaces",
        "spicy mild",
        "sweet savory savoury",
        "introvert introverted extrovert extroverted",
        "red orange yellow green blue purple pink black white grey gray brown",
        "spring summer autumn fall winter",
        "north south east west northern southern eastern western",
        "son daughter",
        "brother sister",
        "husband wife",
        "boyfriend girlfriend",
        "cat cats dog dogs",
        "arrive arrives arrival depart departs departure",
        "inbound outbound",
        "upstairs downstairs",
        "buy bought sell sold",
        "lend lent borrow borrowed",
        "win won lose lost",
        "pass passed fail failed",
        "accept accepted reject rejected decline declined",
        "start started finish finished",
    )
)
_SWAP_OF = {word: i for i, group in enumerate(SWAP_GROUPS) for word in group}
#: Capitalised words that usually start a sentence rather than name something.
_NOT_ENTITIES = _words(
    "the a an user users i we he she they it its this that these those my our your his "
    "her their in on at after before when if every each always never usually today "
    "tomorrow yesterday there here what who how why to for from and or but as by with no "
    "not"
)
_DROPPED = {"the", "a", "an", "is", "are", "am"}

_TOKEN = re.compile(
    r"(?:utc|gmt)\s?[+-]\s?\d{1,2}(?::\d{2})?"  # UTC+1, GMT -05:00
    r"|\d+(?:[.,:/-]\d+)*(?:st|nd|rd|th|am|pm|k)?"  # 3, 3.50, 1,000, 10:30, 2026-01-05, 9pm
    r"|[$€£¥%]"
    r"|[^\W\d_]+(?:['-][^\W\d_]+)*",  # words, with inner hyphens and apostrophes
    re.IGNORECASE,
)
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|'([^']{1,80})'(?![a-z])")
_ISO_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}$|^\d{1,2}/\d{1,2}(?:/\d{2,4})?$")
_CLOCK = re.compile(r"^\d{1,2}(?::\d{2})?(?:am|pm)$|^\d{1,2}:\d{2}$")
_NUMBER = re.compile(r"^\d+(?:[.,]\d+)*(?:st|nd|rd|th|k)?$")


def _number_text(token: str) -> str:
    """``1,000`` → ``1000``, ``3.50`` → ``3.5``, ``2nd`` kept; ``5k`` → ``5000``."""
    suffix = ""
    for end in ("st", "nd", "rd", "th"):
        if token.endswith(end):
            token, suffix = token[: -len(end)], end
    factor = 1
    if token.endswith("k"):
        token, factor = token[:-1], 1000
    try:
        value = Decimal(token.replace(",", "")) * factor
    except InvalidOperation:  # "2026-01-05" and the like are not numbers: kept as written
        return token + suffix
    text = format(value.normalize(), "f")
    return text + suffix


def _words_to_number(words: list[str]) -> str | None:
    """``["twenty", "five"]`` → ``"25"``; ``None`` if not a number phrase."""
    total, current = 0, 0
    for w in words:
        if w in _UNITS_WORDS:
            current += _UNITS_WORDS[w]
        elif w in ("hundred", "thousand", "million"):
            current = max(current, 1) * _TENS_WORDS[w]
            if w != "hundred":
                total, current = total + current, 0
        elif w in _TENS_WORDS:
            current += _TENS_WORDS[w]
        else:
            return None
    return str(total + current)


def _is_number_word(word: str) -> bool:
    return word in _UNITS_WORDS or word in _TENS_WORDS


@dataclass(frozen=True)
class _Token:
    raw: str  # as written
    norm: str  # normalised


@lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[_Token, ...]:
    clean = (
        text.replace("\u2019", "'")
        .replace("\u2018", "'")
        .replace("\u201c", '"')
        .replace("\u201d", '"')
        .replace("\u2212", "-")
        .replace("\u2013", "-")
    )
    out: list[_Token] = []
    words = [match.group(0) for match in _TOKEN.finditer(clean)]
    i = 0
    while i < len(words):
        raw = words[i]
        low = raw.casefold()
        if low.endswith("n't"):  # doesn't → does not, can't → can not, won't → will not
            stem = {"won't": "will", "can't": "can", "shan't": "shall"}.get(low, low[:-3])
            out += [_Token(raw, stem), _Token(raw, "not")]
            i += 1
            continue
        if low.endswith("'s") or low.endswith("s'"):
            low = low[:-2] if low.endswith("'s") else low[:-1]
        parts = low.split("-")
        if all(_is_number_word(p) for p in parts):
            # a run of number words ("twenty five", "twenty-five") is one number
            run, j = list(parts), i + 1
            while j < len(words) and all(
                _is_number_word(p) for p in words[j].casefold().split("-")
            ):
                run += words[j].casefold().split("-")
                j += 1
            number = _words_to_number(run)
            if number is not None:
                out.append(_Token(raw, number))
                i = j
                continue
        if low in _ORDINAL_WORDS and low not in _SWAP_OF:
            low = _ORDINAL_WORDS[low]
        elif _NUMBER.match(low):
            low = _number_text(low)
        elif low.startswith(("utc", "gmt")) and any(c in low for c in "+-"):
            low = re.sub(r"\s", "", low)
            sign, rest = low[3], low[4:]
            hours, _, minutes = rest.partition(":")
            low = f"utc{sign}{int(hours)}" + (f":{minutes}" if minutes.strip("0") else "")
        if low in ("am", "pm") and out and _NUMBER.match(out[-1].norm):
            out[-1] = _Token(out[-1].raw + raw, out[-1].norm + low)  # "9 am" is "9am"
        else:
            out.append(_Token(raw, low))
        i += 1
    return tuple(out)


def normalized_tokens(text: str) -> tuple[str, ...]:
    """The words :func:`equivalent` compares, in order (see the module docstring)."""
    return tuple(t.norm for t in _tokens(text) if t.norm not in _DROPPED)


@dataclass(frozen=True)
class Values:
    """The values one statement carries, each a sorted tuple of normalised strings."""

    numbers: tuple[str, ...]
    dates: tuple[str, ...]
    times: tuple[str, ...]
    quantities: tuple[str, ...]
    negations: int
    entities: tuple[str, ...]
    swaps: tuple[str, ...]


def values_of(text: str) -> Values:
    """The numbers, dates, times, quantities, negations, entities and swap words of ``text``."""
    toks = _tokens(text)
    numbers: list[str] = []
    dates: list[str] = []
    times: list[str] = []
    quantities: list[str] = []
    entities: list[str] = []
    swaps: list[str] = []
    negations = 0
    norms = [t.norm for t in toks]
    for i, t in enumerate(toks):
        n = t.norm
        nxt = norms[i + 1] if i + 1 < len(norms) else ""
        prev = norms[i - 1] if i else ""
        if n in _NEGATIONS:
            negations += 1
        if n in _SWAP_OF:
            swaps.append(n)
        if n in ("may", "march") and not t.raw[:1].isupper():
            continue  # the verbs, not the months
        if _ISO_DATE.match(n) or n in _MONTHS or n in _WEEKDAYS:
            dates.append(n)
        elif _CLOCK.match(n) or n in _ZONES or n.startswith("utc"):
            times.append(n)
        elif _NUMBER.match(n):
            numbers.append(n)
            if nxt in _UNITS:
                quantities.append(f"{n} {nxt}")
            elif prev in _CURRENCY:
                quantities.append(f"{n} {_CURRENCY[prev]}")
        elif t.raw[:1].isupper() and n not in _NOT_ENTITIES:
            entities.append(n)
    for match in _QUOTED.finditer(text):
        quoted = (match.group(1) or match.group(2) or "").strip().casefold()
        if quoted:
            entities.append(" ".join(quoted.split()))
    return Values(
        numbers=tuple(sorted(numbers)),
        dates=tuple(sorted(dates)),
        times=tuple(sorted(times)),
        quantities=tuple(sorted(quantities)),
        negations=negations,
        entities=tuple(sorted(set(entities))),
        swaps=tuple(sorted(swaps)),
    )


def _diff(label: str, old: tuple[str, ...], new: tuple[str, ...]) -> list[str]:
    if Counter(old) == Counter(new):
        return []
    gone = sorted((Counter(old) - Counter(new)).elements())
    came = sorted((Counter(new) - Counter(old)).elements())
    return [f"{label}: {', '.join(gone) or '—'} → {', '.join(came) or '—'}"]


def _mentions(words: str, entity: str) -> bool:
    return f" {' '.join(normalized_tokens(entity))} " in f" {words} "


def value_changes(old: str, new: str) -> tuple[str, ...]:
    """The value differences between ``old`` and ``new`` (empty: none detected)."""
    a, b = values_of(old), values_of(new)
    out: list[str] = []
    out += _diff("number", a.numbers, b.numbers)
    out += _diff("date", a.dates, b.dates)
    out += _diff("time", a.times, b.times)
    out += _diff("quantity", a.quantities, b.quantities)
    if a.negations != b.negations:
        side = "new" if b.negations > a.negations else "existing"
        out.append(f"negation: more in {side} ({a.negations} → {b.negations})")
    # A name counts as changed only if the other statement does not use the word at
    # all: "boston" and "Boston" are the same place.
    words_a, words_b = " ".join(normalized_tokens(old)), " ".join(normalized_tokens(new))
    out += _diff(
        "name",
        tuple(e for e in a.entities if not _mentions(words_b, e)),
        tuple(e for e in b.entities if not _mentions(words_a, e)),
    )
    swapped = {_SWAP_OF[w] for w in a.swaps} ^ {_SWAP_OF[w] for w in b.swaps}
    same_group = [
        g
        for g in {_SWAP_OF[w] for w in a.swaps} & {_SWAP_OF[w] for w in b.swaps}
        if Counter(w for w in a.swaps if _SWAP_OF[w] == g)
        != Counter(w for w in b.swaps if _SWAP_OF[w] == g)
    ]
    if same_group or swapped:
        out += _diff("alternative", a.swaps, b.swaps)
    return tuple(out)


def equivalent(old: str, new: str) -> bool:
    """True only when ``old`` and ``new`` state the same thing word for word (see above)."""
    return normalized_tokens(old) == normalized_tokens(new) and not value_changes(old, new)
