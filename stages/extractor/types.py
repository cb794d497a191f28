"""The memory types the extractor knows: what each asks for and how it becomes a candidate.

A :class:`TypeSpec` is everything type-specific: the instructions (a versioned
prompt file in ``prompts/``), the pydantic model of one extracted item (the
LLM's structured output is ``{"items": [item, ...]}``), the scope, and how an
item's fields give the natural key and the text that is embedded. The four
built-in types and every custom type from ``project-config.yaml`` are specs of
the same shape, run by the same machinery.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cache
from importlib import resources
from string import Template
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from mongomem.errors import ConfigError
from mongomem.ltm.kinds import KINDS
from mongomem.models import BUILTIN_MEMORY_TYPES, EventTime, MemoryType, ScopeKind
from mongomem.project_config import CustomTypeConfig, ProjectConfig

__all__ = [
    "SYSTEM_PROMPT_VERSION",
    "DatedItem",
    "EpisodicItem",
    "ProceduralItem",
    "SemanticItem",
    "TaxonomicItem",
    "TypeSpec",
    "builtin_spec",
    "custom_spec",
    "event_time",
    "load_prompt",
    "parse_model_date",
    "slug",
    "spec_for",
]

#: v2: the known memories of the scope (SPEC K2); v3: citations, speakers, dates (SPEC L1–L4)
SYSTEM_PROMPT_VERSION = "v3"

Fields = dict[str, Any]


@cache
def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (shipped as package data)."""
    return resources.files(__package__).joinpath("prompts", f"{name}.txt").read_text("utf-8")


def slug(text: str) -> str:
    """Lower-case words joined by ``-``: the form of labels, procedure names, domains."""
    return "-".join(re.findall(r"[^\W_]+", text.lower()))[:64]


def _clean(text: str) -> str:
    return " ".join(text.split())


#: The description of every item's ``corrects`` field (the model's hint, SPEC K2).
CORRECTS = (
    "the key of a KNOWN memory this item changes or corrects, exactly as listed; "
    "null if it corrects none"
)


#: The description of every item's ``seqs`` field (its citations, SPEC L4).
SEQS = (
    "the seq numbers of the conversation turns that state this item (at least one); "
    "never a KNOWN memory, which is not a turn"
)
SUBJECT = (
    "whom the item is about: the speaker's or person's name as the conversation gives it, "
    "or null when it is about the user (the owner of this memory)"
)
VALID_FROM = (
    "when it starts to hold or happened: an ISO date (YYYY-MM-DD, or YYYY-MM / YYYY when "
    "only that is known), resolving relative phrases such as 'yesterday' or 'last May' "
    "against the date of the turn that says them; null if the conversation gives no time"
)
VALID_TO = "when it stops holding or ended, the same form as valid_from; null if open or unknown"
TIME_PHRASE = "the words of the conversation that give the time ('last May'), or null"

_PARTIAL_DATE = re.compile(r"^(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?$")


def parse_model_date(value: str, *, end: bool) -> date:
    """A model's ISO date — ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or an ISO datetime — as
    a date: a partial date is its first day (``end``: its last day). Anything else
    raises ``ValueError`` naming the value (the answer is then invalid, SPEC L1)."""
    text = value.strip()
    found = _PARTIAL_DATE.match(text)
    try:
        if found is None:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).date()
        year, month, day = found.group(1), found.group(2), found.group(3)
        if day is not None:
            return date(int(year), int(month), int(day))
        if month is not None:
            first = date(int(year), int(month), 1)
            if not end:
                return first
            following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
            return following - timedelta(days=1)
        return date(int(year), 12, 31) if end else date(int(year), 1, 1)
    except ValueError:
        pass
    raise ValueError(f"not an ISO date: {value!r}")


def event_time(raw: Fields, *, event: bool = True) -> EventTime | None:
    """The event time of an item's ``valid_from``/``valid_to``/``time_phrase`` (popped from
    ``raw``); ``None`` when it gives none. For an ``event`` (an episode) a date alone is the
    day or period it names (``2023-05``: all of May); for a fact that holds it is where the
    fact starts to hold, open-ended. Raises ``ValueError`` on an unparseable date or a
    range that ends first."""
    lo_text, hi_text = raw.pop("valid_from", None), raw.pop("valid_to", None)
    phrase = raw.pop("time_phrase", None)
    lo = parse_model_date(lo_text, end=False) if lo_text else None
    hi = parse_model_date(hi_text, end=True) if hi_text else None
    if event and lo is not None and hi is None:
        hi = parse_model_date(lo_text, end=True)  # "2023-05": all of May; a time: its day
    phrase = _clean(phrase)[:200] if isinstance(phrase, str) and phrase.strip() else None
    found = EventTime(valid_from=lo, valid_to=hi, phrase=phrase)
    return None if found.empty else found


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seqs: list[int] = Field(default_factory=list, max_length=200, description=SEQS)
    corrects: str | None = Field(default=None, max_length=512, description=CORRECTS)


class DatedItem(_Item):
    """An item that may say whom it is about and when (SPEC L1, L3).

    ``EVENT``: a date alone is the day or period of an event (episodes); else where a
    fact starts to hold (:func:`event_time`)."""

    EVENT: ClassVar[bool] = False

    subject: str | None = Field(default=None, max_length=200, description=SUBJECT)
    valid_from: str | None = Field(default=None, max_length=40, description=VALID_FROM)
    valid_to: str | None = Field(default=None, max_length=40, description=VALID_TO)
    time_phrase: str | None = Field(default=None, max_length=200, description=TIME_PHRASE)

    @model_validator(mode="after")
    def _dates(self) -> DatedItem:
        event_time(self.model_dump(), event=self.EVENT)  # unparseable, or reversed: invalid
        return self


class SemanticItem(DatedItem):
    label: str = Field(min_length=1, max_length=80, description="kebab-case name of the fact")
    fact: str = Field(min_length=1, max_length=2000, description="the fact, one sentence")


class EpisodicItem(DatedItem):
    EVENT: ClassVar[bool] = True
    title: str = Field(min_length=1, max_length=200, description="short title")
    account: str = Field(min_length=1, max_length=4000, description="what happened")
    participants: list[str] = Field(description="who took part, by name where known")


class ProceduralItem(_Item):
    name: str = Field(min_length=1, max_length=80, description="kebab-case procedure name")
    description: str = Field(min_length=1, max_length=1000, description="what it achieves")
    steps: list[str] = Field(min_length=1, max_length=50, description="the steps, in order")


class TaxonomicItem(_Item):
    domain: str = Field(min_length=1, max_length=80, description="the domain, lower case")
    term: str = Field(min_length=1, max_length=200, description="the term")
    definition: str = Field(min_length=1, max_length=2000, description="its definition")


@dataclass(frozen=True)
class TypeSpec:
    """One memory type as the extractor runs it."""

    name: str
    scope: ScopeKind
    prompt_version: str
    instructions: str
    item_model: type[BaseModel]
    #: validated item fields → normalised fields (stored on the candidate)
    normalise: Callable[[Fields], Fields]
    #: normalised fields → natural key
    key_of: Callable[[Fields], str]
    #: normalised fields → the text that is embedded
    text_of: Callable[[Fields], str]
    output_model: type[BaseModel] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        output = create_model(  # {"items": [item, ...]}
            f"Extract{self.item_model.__name__}s",
            __config__=ConfigDict(frozen=True, extra="forbid"),
            items=(list[self.item_model], Field(max_length=100)),  # type: ignore[name-defined]
        )
        object.__setattr__(self, "output_model", output)

    @property
    def schema_name(self) -> str:
        return f"extract_{self.name}"

    def system_prompt(self, nonce: str) -> str:
        return Template(load_prompt(f"system-{SYSTEM_PROMPT_VERSION}")).safe_substitute(
            instructions=self.instructions, nonce=nonce
        )

    @property
    def full_prompt_version(self) -> str:
        """The version that goes into candidate ids: type prompt + system prompt."""
        return f"{self.prompt_version}+sys-{SYSTEM_PROMPT_VERSION}"


# The normalised fields are the stored fields of mongomem.ltm.kinds (the table
# the reconciler and the SDK share), plus type-specific extras (participants,
# when, steps), so an extracted memory and a direct save of the same thing have
# the same key, the same embedded text, and read back the same way.


def _semantic(f: Fields) -> Fields:
    return {"label": slug(f["label"]), "text": _clean(f["fact"])}


def _episodic(f: Fields) -> Fields:
    participants = [_clean(p) for p in f["participants"] if _clean(p)]
    return {
        "title": _clean(f["title"]),
        "content": _clean(f["account"]),
        "participants": sorted(dict.fromkeys(participants)),
        # the event time itself is the candidate's ``event``; ``when`` is set from it
        "when": None,
    }


def _procedural(f: Fields) -> Fields:
    steps = [_clean(s) for s in f["steps"] if _clean(s)]
    return {
        "name": slug(f["name"]),
        "description": _clean(f["description"]),
        "steps": steps,
        "content": "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)),
    }


def _taxonomic(f: Fields) -> Fields:
    term = _clean(f["term"])
    return {
        "domain": slug(f["domain"]) or "general",
        "term": term if term.isupper() else term.lower(),
        "definition": _clean(f["definition"]),
    }


_BUILTIN: dict[str, tuple[ScopeKind, type[BaseModel], Callable[[Fields], Fields]]] = {
    MemoryType.SEMANTIC: (ScopeKind.USER, SemanticItem, _semantic),
    MemoryType.EPISODIC: (ScopeKind.USER, EpisodicItem, _episodic),
    MemoryType.PROCEDURAL: (ScopeKind.USER, ProceduralItem, _procedural),
    MemoryType.TAXONOMIC: (ScopeKind.PROJECT, TaxonomicItem, _taxonomic),
}

BUILTIN_PROMPT_VERSION = "v2"  # v2: citations, subjects and event dates (SPEC L1–L4)


def builtin_spec(name: str) -> TypeSpec:
    scope, item, normalise = _BUILTIN[name]
    kind = KINDS[name]
    return TypeSpec(
        name=name,
        scope=scope,
        prompt_version=f"{name}-{BUILTIN_PROMPT_VERSION}",
        instructions=load_prompt(f"{name}-{BUILTIN_PROMPT_VERSION}"),
        item_model=item,
        normalise=normalise,
        key_of=kind.key,
        text_of=kind.text,
    )


def custom_spec(config: CustomTypeConfig) -> TypeSpec:
    """A spec for a project's own type. Key fields are required, the others nullable.

    The prompt version carries a hash of the declaration, so changing the
    instructions or the fields changes the candidate ids.
    """
    # Python names are prefixed so a declared field such as "schema" or "model_x" cannot
    # shadow a pydantic attribute; the JSON names (aliases) are the declared ones.
    definitions: dict[str, Any] = {}
    for name, description in config.fields.items():
        if name in config.key:
            spec = Field(alias=name, min_length=1, max_length=512, description=description)
            definitions[f"f_{name}"] = (str, spec)
        else:
            spec = Field(alias=name, max_length=4000, description=description)
            definitions[f"f_{name}"] = (str | None, spec)
    if "seqs" not in config.fields:  # a declared field of that name keeps its meaning
        definitions["hint_seqs"] = (
            list[int],
            Field(default_factory=list, alias="seqs", max_length=200, description=SEQS),
        )
    if "corrects" not in config.fields:  # a declared field of that name keeps its meaning
        definitions["hint_corrects"] = (
            str | None,
            Field(default=None, alias="corrects", max_length=512, description=CORRECTS),
        )
    item = create_model(
        f"Custom_{config.name.replace('-', '_')}",
        __config__=ConfigDict(frozen=True, extra="forbid"),
        **definitions,
    )
    declaration = config.model_dump_json()
    digest = hashlib.sha256(declaration.encode()).hexdigest()[:10]
    fields_text = "\n".join(
        f"- {name}{' (part of the key)' if name in config.key else ''}: {desc}"
        for name, desc in config.fields.items()
    )
    instructions = Template(load_prompt(f"custom-{BUILTIN_PROMPT_VERSION}")).safe_substitute(
        name=config.name,
        scope="shared by the whole project" if config.scope == "project" else "one user",
        instructions=config.instructions.strip(),
        fields=fields_text,
    )

    def normalise(f: Fields) -> Fields:
        return {k: (_clean(v) if isinstance(v, str) else v) for k, v in f.items()}

    def key_of(f: Fields) -> str:
        return "/".join(str(f[k]) for k in config.key)

    def text_of(f: Fields) -> str:
        return "; ".join(f"{k}: {v}" for k, v in f.items() if v)

    return TypeSpec(
        name=config.name,
        scope=ScopeKind.PROJECT if config.scope == "project" else ScopeKind.USER,
        prompt_version=f"{config.name}-custom-{BUILTIN_PROMPT_VERSION}-{digest}",
        instructions=instructions,
        item_model=item,
        normalise=normalise,
        key_of=key_of,
        text_of=text_of,
    )


def spec_for(name: str, config: ProjectConfig | None = None) -> TypeSpec:
    """The spec of a built-in or declared custom type, or a :class:`ConfigError`."""
    if name in BUILTIN_MEMORY_TYPES:
        return builtin_spec(name)
    custom = config.custom_type(name) if config is not None else None
    if custom is None:
        raise ConfigError(
            f"unknown memory type {name!r}: not built in and not declared under "
            "memory.extraction.custom in project-config.yaml"
        )
    return custom_spec(custom)
