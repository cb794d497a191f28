"""The four built-in memory types: their natural keys, fields and embedded text.

One table shared by the extractor (which builds candidates), the reconciler
(which matches them) and the SDK (which saves and reads them), so the three
always agree on what a key is.

=============  ==========================  ==============================  =========
type           fields                      key                             scope
=============  ==========================  ==============================  =========
semantic       label, text                 label                           user
episodic       title, content              title                           user
procedural     name, description, content  name                            user
taxonomic      domain, term, definition    ``domain/term``                 project
=============  ==========================  ==============================  =========

Keys are compared after :func:`normalize_key` (case-folded, runs of spaces and
underscores become ``-``), so ``Home Airport`` and ``home-airport`` are the
same memory.

What a caller may send (:meth:`Kind.check`, strict): exactly the type's fields, each a
non-empty string of at most :data:`MAX_FIELD_CHARS` characters; key fields
(label, title, name, domain, term) hold no control characters at all, the
other fields none but tab, newline and carriage return — the rule ids follow.
Key fields are labels: NFC-normalised, and a strict check refuses an invisible
character in one (:mod:`mongomem.identifiers`; an extractor's are dropped).
An unknown field is refused by name (a typo such as ``lable`` would otherwise
store a memory without its label).

A custom type ``project-config.yaml`` declares has a kind too (:func:`custom_kind`):
the same rules for its fields, the ones outside its key optional.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mongomem.errors import InputError
from mongomem.identifiers import clean_label, invisible_character
from mongomem.models import Evidence, MemoryCandidate, MemoryScope, MemoryType, ScopeKind
from mongomem.project_config import CustomTypeConfig

__all__ = [
    "KINDS",
    "MAX_FIELD_CHARS",
    "Kind",
    "custom_kind",
    "kind_of",
    "make_candidate",
    "normalize_key",
    "normalize_text",
    "scope_for",
]

#: The longest value of one field, in characters (the embedder reads far less).
MAX_FIELD_CHARS = 32_768
#: The longest label field (a key's part) a caller may send: a taxonomic ``domain/term``
#: key stays within its 512 characters, and the service's document can say so per field.
MAX_LABEL_CHARS = 255

_SEPARATORS = re.compile(r"[\s_]+")
#: Control characters: none in a key field; in a text field, all but \t \n \r.
_KEY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_TEXT_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"\s+")


def normalize_key(key: str) -> str:
    """The form in which keys are compared and indexed."""
    return _SEPARATORS.sub("-", key.strip().casefold())


def normalize_text(text: str) -> str:
    """The form in which texts are compared for exact repetition."""
    return _SPACES.sub(" ", text.strip().casefold()).rstrip(".!")


@dataclass(frozen=True)
class Kind:
    """How one memory type names, stores and embeds its memories."""

    memory_type: str
    fields: tuple[str, ...]
    key_fields: tuple[str, ...]
    scope: ScopeKind
    #: Fields a memory may leave out (a custom type's fields outside its key).
    optional: frozenset[str] = frozenset()

    def key(self, fields: Mapping[str, Any]) -> str:
        """The natural key from the fields (``domain/term`` for taxonomic)."""
        return "/".join(str(fields[name]).strip() for name in self.key_fields)

    def text(self, fields: Mapping[str, Any]) -> str:
        """What is embedded and compared."""
        f = {name: str(fields.get(name, "")).strip() for name in self.fields}
        match self.memory_type:
            case MemoryType.SEMANTIC:
                return f["text"]
            case MemoryType.EPISODIC:
                return f"{f['title']}: {f['content']}"
            case MemoryType.PROCEDURAL:
                return f"{f['name']}: {f['description']}\n{f['content']}"
            case MemoryType.TAXONOMIC:
                return f"{f['domain']} / {f['term']}: {f['definition']}"
            case _:  # a custom type: its fields that have a value, as its extractor says them
                return "; ".join(f"{name}: {value}" for name, value in f.items() if value)

    def check(self, fields: Mapping[str, Any], *, strict: bool = False) -> dict[str, str]:
        """The type's fields, stripped; :class:`InputError` names a missing or bad one.

        ``strict`` (what a caller sends: SDK saves, the service) also refuses a
        field the type does not have; without it other fields are left out (the
        extractor's richer items keep theirs elsewhere).
        """
        unknown = sorted(str(name) for name in fields if name not in self.fields)
        if strict and unknown:
            raise InputError(
                f"{self.memory_type} memories have no field {unknown[0]!r} "
                f"(their fields: {', '.join(self.fields)})",
                field=f"fields.{unknown[0]}",
            )
        out: dict[str, str] = {}
        for name in self.fields:
            value = fields.get(name)
            if name in self.optional and value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                raise InputError(
                    f"{self.memory_type} memories need a non-empty {name!r}", field=name
                )
            if len(value) > MAX_FIELD_CHARS:
                raise InputError(
                    f"{name!r} is longer than {MAX_FIELD_CHARS} characters", field=name
                )
            if strict and name in self.key_fields and len(value) > MAX_LABEL_CHARS:
                raise InputError(
                    f"{name!r} is a label: at most {MAX_LABEL_CHARS} characters", field=name
                )
            control = _KEY_CONTROL if name in self.key_fields else _TEXT_CONTROL
            if control.search(value):
                raise InputError(f"{name!r} must not contain control characters", field=name)
            if name in self.key_fields:  # a label: NFC, nothing invisible (mongomem.identifiers)
                value, why = clean_label(value)
                if why is not None and strict:
                    raise InputError(f"{name!r} {why}", field=name)
                if why is not None:  # an extractor's output: drop what cannot be seen
                    value = "".join(c for c in value if invisible_character(c) is None)
            out[name] = value.strip()
        if self.memory_type == MemoryType.TAXONOMIC and "/" in out.get("domain", ""):
            raise InputError("a taxonomic domain must not contain '/'", field="domain")
        if len(self.key(out)) > 512:
            raise InputError("the memory's key is longer than 512 characters")
        return out


KINDS: dict[str, Kind] = {
    MemoryType.SEMANTIC: Kind(MemoryType.SEMANTIC, ("label", "text"), ("label",), ScopeKind.USER),
    MemoryType.EPISODIC: Kind(
        MemoryType.EPISODIC, ("title", "content"), ("title",), ScopeKind.USER
    ),
    MemoryType.PROCEDURAL: Kind(
        MemoryType.PROCEDURAL, ("name", "description", "content"), ("name",), ScopeKind.USER
    ),
    MemoryType.TAXONOMIC: Kind(
        MemoryType.TAXONOMIC,
        ("domain", "term", "definition"),
        ("domain", "term"),
        ScopeKind.PROJECT,
    ),
}


def custom_kind(config: CustomTypeConfig) -> Kind:
    """The kind of a custom type ``project-config.yaml`` declares (SPEC C6): its declared
    fields, in order; its key fields required, the others optional; its text the fields
    that have a value, ``name: value`` joined by ``; `` (what its extractor embeds)."""
    scope = ScopeKind.PROJECT if config.scope == "project" else ScopeKind.USER
    key = tuple(config.key)
    optional = frozenset(name for name in config.fields if name not in key)
    return Kind(config.name, tuple(config.fields), key, scope, optional)


def kind_of(memory_type: str) -> Kind:
    """The built-in kind, or :class:`InputError` for an unknown type name."""
    try:
        return KINDS[memory_type]
    except KeyError:
        raise InputError(f"unknown memory type {memory_type!r}", field="memory_type") from None


def scope_for(memory_type: str, project_id: str, user_id: str) -> MemoryScope:
    """The scope a memory of this type lives in for this caller (SPEC F3)."""
    kind = KINDS.get(memory_type)
    if kind is not None and kind.scope is ScopeKind.PROJECT:
        return MemoryScope(project_id=project_id)
    return MemoryScope(project_id=project_id, user_id=user_id)


def make_candidate(
    memory_type: str,
    scope: MemoryScope,
    fields: Mapping[str, Any],
    embedding: Sequence[float],
    *,
    candidate_id: str,
    evidence: Evidence,
    created_at: datetime,
    prompt_version: str = "direct",
    model: str | None = None,
    kind: Kind | None = None,
) -> MemoryCandidate:
    """A candidate of a built-in type (or of ``kind``, a custom type's), with its key and
    text derived from ``fields``.

    ``embedding`` must be the embedding of the kind's ``text(fields)``.
    """
    kind = kind or kind_of(memory_type)
    checked = kind.check(fields)
    return MemoryCandidate(
        candidate_id=candidate_id,
        memory_type=memory_type,
        scope=scope,
        key=kind.key(checked),
        fields=checked,
        text=kind.text(checked),
        embedding=tuple(embedding),
        evidence=evidence,
        prompt_version=prompt_version,
        model=model,
        created_at=created_at,
    )
