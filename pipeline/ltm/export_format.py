"""The line format of a user's memory export (SPEC J4): pure encoding, checks, relocation.

An export is JSON lines (UTF-8, one object per line, ``\\n``-terminated), in
this order:

1. one ``header``: ``{"kind": "header", "format": "mongomem.memory-export",
   "format_version": 1, "project_id", "user_id", "embedder": {"name",
   "dimensions"} | null, "exported_at", "mongomem_version"}`` — the source
   scope and the embedder configured where it was made (``null``: none was);
2. every stored version of every memory of the user's own scope, grouped by
   memory and in version order: ``{"kind": "version", "doc": {...}}``, where
   ``doc`` is the stored document in MongoDB Extended JSON (relaxed: times
   are ``{"$date": ISO}``, the embedding ``{"$binary": ...}`` float32
   little-endian) less the fields recomputed on import (``key_norm``), with
   ``turn_ids``: for each evidence item, the ids of the turns it came from
   (its snapshot's turns; ``[]`` for a direct save) — the reinforcement count
   is the number of ``candidate_ids``;
3. every decision-log entry of that scope: ``{"kind": "decision", "doc": {...}}``;
4. one ``end``: ``{"kind": "end", "versions": N, "decisions": M}`` — a file
   without it was cut short, and is refused.

Project-scoped memories (taxonomic terms) belong to the project, not the user,
and are not in a user's export.

**Relocation.** Imported into the scope it came from (a fresh database), every
id stays. Imported into another (project, user), ids that are derived from the
scope move with it (:func:`relocate`): a memory id ``m`` becomes
:func:`moved_id` ``(target, m)``, version ids are recomputed from the new
memory id (``MemoryVersion.make_version_id``, which later UPDATEs rely on),
decision-log ids move like memory ids, and every ``scope`` becomes the
target's. Candidate ids and evidence (snapshot ids, turn ids, times) are
provenance and stay as they were.

**Ids an import keeps.** A stored id is unique across every scope, so an id
in a file could be another tenant's. Into the scope a file names as its
source, an import keeps a memory id only when the scope already holds it or
when the pipeline derives it for that scope (:func:`owns_memory_id`); any
other memory id, and every decision-log id the scope does not hold, is stored
as :func:`moved_id` ``(target, id)``. What an import stores therefore depends
on the file and the target's own data only, never on another tenant's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from bson import json_util
from bson.json_util import JSONMode, JSONOptions
from pydantic import ValidationError

from mongomem.errors import InputError
from mongomem.ltm.documents import decode_embedding, from_document
from mongomem.ltm.plan import MAX_INCARNATIONS, memory_id_for
from mongomem.models import Action, MemoryScope, MemoryStatus, MemoryVersion, stable_id

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_LINE_BYTES",
    "ExportHeader",
    "LineError",
    "MemoryGroup",
    "canonical",
    "check_decision",
    "check_group",
    "check_version",
    "decision_line",
    "dump_line",
    "end_line",
    "header_line",
    "moved_id",
    "owns_memory_id",
    "parse_header",
    "parse_line",
    "relocate_decision",
    "relocate_group",
    "rename_decision",
    "rename_memory",
    "version_line",
]

FORMAT = "mongomem.memory-export"
FORMAT_VERSION = 1
#: The longest line an import reads (a version with four 32k-character fields and its
#: vector fits many times over).
MAX_LINE_BYTES = 8 * 1024 * 1024

Doc = dict[str, Any]
Kind = Literal["header", "version", "decision", "end"]

_JSON = JSONOptions(json_mode=JSONMode.RELAXED, tz_aware=True)
#: Stored fields that the import recomputes, and the import's own bookkeeping.
_NOT_EXPORTED = frozenset({"key_norm", "import_id"})
_STATUSES = frozenset(s.value for s in MemoryStatus)


class LineError(InputError):
    """A line of an import that cannot be taken; ``line`` is its 1-based number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}", field="import")
        self.line = line


@dataclass(frozen=True)
class ExportHeader:
    project_id: str
    user_id: str
    embedder: tuple[str, int] | None
    exported_at: str

    @property
    def scope(self) -> MemoryScope:
        return MemoryScope(project_id=self.project_id, user_id=self.user_id)


def dump_line(obj: Doc) -> str:
    """One line of the format: ``obj`` in relaxed Extended JSON, keys sorted, ``\\n``-ended."""
    return json_util.dumps(obj, json_options=_JSON, ensure_ascii=False, sort_keys=True) + "\n"


def header_line(
    project_id: str, user_id: str, embedder: tuple[str, int] | None, at: datetime, version: str
) -> str:
    return dump_line(
        {
            "kind": "header",
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "project_id": project_id,
            "user_id": user_id,
            "embedder": None
            if embedder is None
            else {"name": embedder[0], "dimensions": embedder[1]},
            "exported_at": at.isoformat(),
            "mongomem_version": version,
        }
    )


def version_line(doc: Doc, turn_ids: list[list[str]]) -> str:
    """The line of one stored version; ``turn_ids`` has one list per evidence item."""
    kept = {k: v for k, v in doc.items() if k not in _NOT_EXPORTED}
    count = max(1, len(doc.get("candidate_ids", ())))
    return dump_line(
        {"kind": "version", "doc": kept, "turn_ids": turn_ids, "reinforcement_count": count}
    )


def decision_line(doc: Doc) -> str:
    return dump_line(
        {"kind": "decision", "doc": {k: v for k, v in doc.items() if k != "import_id"}}
    )


def end_line(versions: int, decisions: int) -> str:
    return dump_line({"kind": "end", "versions": versions, "decisions": decisions})


def parse_line(raw: bytes | str, number: int) -> tuple[Kind, Doc]:
    """One line's kind and object (BSON types restored); :class:`LineError` if it is none."""
    if len(raw) > MAX_LINE_BYTES:
        raise LineError(number, f"longer than {MAX_LINE_BYTES} bytes")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        obj = json_util.loads(text, json_options=_JSON)
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise LineError(number, f"not a JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise LineError(number, "not a JSON object")
    kind = obj.get("kind")
    if kind not in ("header", "version", "decision", "end"):
        raise LineError(number, f"unknown kind {kind!r} (header, version, decision or end)")
    return kind, obj


def parse_header(obj: Doc, number: int) -> ExportHeader:
    if obj.get("format") != FORMAT:
        raise LineError(number, f"not a mongomem memory export (format {obj.get('format')!r})")
    if obj.get("format_version") != FORMAT_VERSION:
        raise LineError(
            number, f"format_version {obj.get('format_version')!r} is not {FORMAT_VERSION}"
        )
    embedder = obj.get("embedder")
    named: tuple[str, int] | None = None
    if embedder is not None:
        if not (
            isinstance(embedder, dict)
            and isinstance(embedder.get("name"), str)
            and isinstance(embedder.get("dimensions"), int)
        ):
            raise LineError(number, "embedder must be {name, dimensions} or null")
        named = (embedder["name"], embedder["dimensions"])
    try:
        scope = MemoryScope(project_id=obj.get("project_id"), user_id=obj.get("user_id"))
    except ValidationError as exc:
        raise LineError(number, f"bad project_id or user_id: {exc.errors()[0]['msg']}") from None
    assert scope.user_id is not None
    return ExportHeader(scope.project_id, scope.user_id, named, str(obj.get("exported_at")))


@dataclass
class MemoryGroup:
    """Every version of one memory, as read from consecutive ``version`` lines."""

    memory_id: str
    first_line: int
    docs: list[Doc] = field(default_factory=list)
    turn_ids: list[list[list[str]]] = field(default_factory=list)

    @property
    def last(self) -> Doc:
        return self.docs[-1]


def check_version(obj: Doc, number: int, source: MemoryScope, dims: int | None) -> Doc:
    """The stored document of a ``version`` line, checked as the store would read it."""
    doc = obj.get("doc")
    turns = obj.get("turn_ids")
    if not isinstance(doc, dict):
        raise LineError(number, "a version line has a 'doc' object")
    if doc.get("status") not in _STATUSES:
        raise LineError(number, f"status {doc.get('status')!r} is not one of {sorted(_STATUSES)}")
    try:
        version = from_document(doc)
    except (ValidationError, ValueError, TypeError, KeyError) as exc:
        raise LineError(number, f"not a memory version: {_first(exc)}") from None
    if version.scope != source:
        raise LineError(number, "a version outside the header's project and user")
    if version.version_id != MemoryVersion.make_version_id(version.memory_id, version.version):
        raise LineError(number, "the version's _id does not match its memory_id and version")
    if not isinstance(doc.get("candidate_id"), str) or not isinstance(
        doc.get("candidate_ids"), list
    ):
        raise LineError(number, "a version has its candidate_id and candidate_ids")
    if version.action not in (Action.DELETE, Action.EXPIRE):
        width = len(decode_embedding(doc.get("embedding", b"")))
        if width == 0 or (dims is not None and width != dims):
            raise LineError(number, f"the embedding has {width} dimensions, the header {dims}")
    lists = isinstance(turns, list) and all(
        isinstance(t, list) and all(isinstance(i, str) for i in t) for t in turns
    )
    if not lists or not isinstance(turns, list) or len(turns) != len(version.evidence):
        raise LineError(number, "turn_ids has one list of turn ids per evidence item")
    return doc


def check_group(group: MemoryGroup) -> None:
    """A memory's versions are 1..n in order; at most one is current — the last, or one
    with only history versions after it (older statements that arrived later, SPEC L2) —
    and only the last may close it (deleted, expired)."""
    numbers = [int(d["version"]) for d in group.docs]
    if numbers != list(range(1, len(numbers) + 1)):
        raise LineError(
            group.first_line, f"memory {group.memory_id}: versions {numbers} are not 1..n in order"
        )
    current = [d for d in group.docs if d["status"] == MemoryStatus.CURRENT]
    for doc in group.docs[:-1]:
        if doc["status"] not in (MemoryStatus.SUPERSEDED, MemoryStatus.CURRENT) or (
            doc["status"] == MemoryStatus.CURRENT and len(current) > 1
        ):
            raise LineError(
                group.first_line,
                f"memory {group.memory_id}: version {doc['version']} is {doc['status']} "
                "but not the last",
            )
    kinds = {(d["memory_type"], d["key"]) for d in group.docs}
    if len({t for t, _ in kinds}) != 1:
        raise LineError(group.first_line, f"memory {group.memory_id} changes its memory type")


def moved_id(target: MemoryScope, old: str) -> str:
    """The id that ``old`` (a memory id or a decision-log id) takes in ``target``."""
    prefix = old.split("_", 1)[0] if "_" in old else "id"
    return stable_id(prefix, "moved", target.project_id, target.user_id or "", old)


def relocate_group(group: MemoryGroup, source: MemoryScope, target: MemoryScope) -> list[Doc]:
    """The group's documents as they are stored in ``target`` (unchanged when it is the source)."""
    if target == source:
        return [dict(d) for d in group.docs]
    moved = rename_memory(group.docs, moved_id(target, group.memory_id))
    return [{**d, "scope": target.model_dump()} for d in moved]


def rename_memory(docs: list[Doc], new_memory: str) -> list[Doc]:
    """One memory's version documents under the memory id ``new_memory``: version ids are
    recomputed from it, and ``superseded_by`` links within the memory follow."""
    numbers = {d["_id"]: int(d["version"]) for d in docs}
    out = []
    for doc in docs:
        moved = {
            **doc,
            "memory_id": new_memory,
            "_id": MemoryVersion.make_version_id(new_memory, int(doc["version"])),
        }
        by = doc.get("superseded_by")
        if isinstance(by, str) and by in numbers:
            moved["superseded_by"] = MemoryVersion.make_version_id(new_memory, numbers[by])
        out.append(moved)
    return out


def owns_memory_id(scope: MemoryScope, memory_type: str, key: str, memory_id: str) -> bool:
    """Whether ``memory_id`` is one the pipeline derives for ``key`` in ``scope``
    (:func:`~mongomem.ltm.plan.memory_id_for`, any incarnation the store gives).

    An import keeps only such ids (and ids the scope already holds): any other id
    could be another tenant's, and a stored id is unique across every scope.
    """
    return any(
        memory_id_for(scope, memory_type, key, incarnation) == memory_id
        for incarnation in range(MAX_INCARNATIONS)
    )


def relocate_decision(doc: Doc, source: MemoryScope, target: MemoryScope) -> Doc:
    """A decision-log entry as it is stored in ``target`` (see the module docstring)."""
    if target == source:
        return dict(doc)
    moved = rename_decision(doc, moved_id(target, str(doc["_id"])), lambda m: moved_id(target, m))
    return {**moved, "scope": target.model_dump()}


def rename_decision(doc: Doc, new_id: str, memory_of: Callable[[str], str]) -> Doc:
    """A decision-log entry under the id ``new_id``, its memory ids mapped by ``memory_of``
    (and its outcome's version id recomputed from the mapped memory id)."""
    moved = {**doc, "_id": new_id}
    if isinstance(doc.get("memory_id"), str):
        moved["memory_id"] = memory_of(doc["memory_id"])
    outcome = doc.get("outcome")
    if isinstance(outcome, dict) and isinstance(outcome.get("memory_id"), str):
        memory = memory_of(outcome["memory_id"])
        moved["outcome"] = {**outcome, "memory_id": memory}
        if isinstance(outcome.get("version"), int):
            moved["outcome"]["version_id"] = MemoryVersion.make_version_id(
                memory, outcome["version"]
            )
    scores = doc.get("scores")
    if isinstance(scores, list):
        moved["scores"] = [
            {**s, "memory_id": memory_of(s["memory_id"])}
            if isinstance(s, dict) and isinstance(s.get("memory_id"), str)
            else s
            for s in scores
        ]
    return moved


def check_decision(obj: Doc, number: int, source: MemoryScope) -> Doc:
    doc = obj.get("doc")
    if not isinstance(doc, dict) or not isinstance(doc.get("_id"), str):
        raise LineError(number, "a decision line has a 'doc' object with a string _id")
    scope = doc.get("scope")
    if scope != source.model_dump():
        raise LineError(number, "a decision outside the header's project and user")
    return doc


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        return f"{where}: {err['msg']}"
    return str(exc)


def canonical(line: str) -> Doc:
    """A line as plain JSON (for comparing two exports)."""
    out: Doc = json.loads(line)
    return out
