"""Extraction results are data (SPEC I6): one LLM answer per snapshot, type and prompt.

The collection ``extraction_results`` keeps each validated extraction answer
under a unique key, ``_id`` = :meth:`ResultKey.doc_id` of

    (snapshot id, memory type, prompt version, schema version, model,
     structured-output mode)

with the tokens it cost. Before asking the LLM, an extractor looks the key up
(:meth:`ExtractionResults.find`): a replay from offset 0, a re-published
snapshot, an extractor restarted after a crash or a second consumer group
gets the stored answer and makes **no** LLM call. A new prompt version (the
type's or the system prompt's, :attr:`TypeSpec.full_prompt_version`), a
changed output schema (:func:`schema_version`), another model or another
structured-output mode is another key, so the LLM is asked again.
``mongomem replay extractor --re-extract`` asks again on purpose and
replaces the stored answer (:meth:`ExtractionResults.replace`).

**Why it asked.** When the LLM is asked, :func:`why_asked` says why, from the
keys stored for the same snapshot and type (:meth:`ExtractionResults.keys_of`):
``new`` (none), ``re-extract``, the parts of the key that changed (``prompt``,
``schema``, ``model``, ``mode``, joined by ``+``), or ``invalid`` (the stored
answer no longer fits the output model). The extraction run records it and
``mongomem status`` counts it per type.

**First answer wins.** :meth:`ExtractionResults.keep` inserts only when the
key is absent and returns what is stored, so two consumers that both asked
publish the same candidates (same ids, same texts): the reconciler sees one
answer per key, however many processes raced for it.

The known memories shown to the model (SPEC K2) are not part of the key: they
help it keep labels stable, and a replay must not pay again because memory
has grown since. Each document carries the snapshot's project, user and
session, so erasure removes it by lineage like every other derived record
(SPEC J2, :mod:`mongomem.erasure.erase`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ValidationError
from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem.adapters.llm import LLMResult, LLMUsage
from mongomem.adapters.mongo import EXTRACTIONS, Document
from mongomem.errors import StorageError
from mongomem.models import Snapshot, stable_id

__all__ = [
    "EXTRACTIONS",
    "AnswerStore",
    "ExtractionResults",
    "MemoryExtractionResults",
    "ResultKey",
    "StoredResult",
    "schema_version",
    "why_asked",
]

log = logging.getLogger(__name__)


def schema_version(model: type[BaseModel]) -> str:
    """A version of an output schema: 12 hex digits of SHA-256 over its JSON schema.

    Any change to the fields, their types or their constraints changes it,
    whether or not someone remembered to bump a constant.
    """
    schema = json.dumps(model.model_json_schema(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(schema.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ResultKey:
    """What an extraction answer depends on (the unique key of ``extraction_results``)."""

    snapshot_id: str
    memory_type: str
    prompt_version: str
    schema_version: str
    model: str
    mode: str

    @property
    def doc_id(self) -> str:
        return stable_id(
            "extraction",
            self.snapshot_id,
            self.memory_type,
            self.prompt_version,
            self.schema_version,
            self.model,
            self.mode,
        )

    def fields(self) -> Document:
        return {
            "snapshot_id": self.snapshot_id,
            "memory_type": self.memory_type,
            "prompt_version": self.prompt_version,
            "schema_version": self.schema_version,
            "model": self.model,
            "mode": self.mode,
        }


#: The parts of a :class:`ResultKey` that make the LLM be asked again, as status names them.
_PARTS: tuple[tuple[str, str], ...] = (
    ("prompt_version", "prompt"),
    ("schema_version", "schema"),
    ("model", "model"),
    ("mode", "mode"),
)


def why_asked(key: ResultKey, stored: list[ResultKey], *, re_extract: bool = False) -> str:
    """Why the LLM is asked for ``key``, given the keys ``stored`` for its snapshot and type:
    ``re-extract``, ``new``, ``invalid`` (``key`` itself is stored, but its answer no longer
    fits), or what changed against the nearest stored key (``prompt+model`` …)."""
    if re_extract:
        return "re-extract"
    if not stored:
        return "new"
    if key in stored:
        return "invalid"

    def changed(other: ResultKey) -> list[str]:
        return [name for field_, name in _PARTS if getattr(other, field_) != getattr(key, field_)]

    nearest = min((changed(other) for other in stored), key=len)
    return "+".join(nearest)


@dataclass(frozen=True)
class StoredResult:
    """A stored answer, validated again against today's output model."""

    value: BaseModel
    answer_model: str
    usage: LLMUsage

    def as_result(self) -> LLMResult[BaseModel]:
        """The answer as if the LLM had just given it (no latency: nothing was asked)."""
        return LLMResult(value=self.value, model=self.answer_model, usage=self.usage, latency_s=0.0)


class AnswerStore(Protocol):
    """Where the handler finds and keeps extraction answers (each method may raise
    :class:`StorageError`)."""

    async def find(self, key: ResultKey, output: type[BaseModel]) -> StoredResult | None: ...

    async def keep(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> StoredResult: ...

    async def replace(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> None: ...

    async def keys_of(self, snapshot_id: str, memory_type: str) -> list[ResultKey]:
        """The keys of every answer stored for this snapshot and type (any prompt, model …)."""
        ...


class ExtractionResults:
    """``extraction_results``: find, keep (first answer wins) and replace answers.

    Every method raises :class:`StorageError` when MongoDB fails; the handler
    then simply asks the LLM (a failed lookup) or goes on without storing.
    """

    def __init__(self, collection: AsyncCollection[Document]) -> None:
        self._collection = collection

    async def ensure_index(self) -> None:
        """The lineage index erasure deletes by (``_id`` is the unique key), and the one
        :meth:`keys_of` reads by."""
        try:
            await self._collection.create_index(
                [("project_id", 1), ("user_id", 1), ("session_id", 1)]
            )
            await self._collection.create_index([("snapshot_id", 1), ("memory_type", 1)])
        except PyMongoError as exc:
            raise StorageError(f"could not index {EXTRACTIONS}: {exc}") from exc

    async def find(self, key: ResultKey, output: type[BaseModel]) -> StoredResult | None:
        """The stored answer of ``key``; ``None`` if absent or no longer valid for ``output``."""
        try:
            doc = await self._collection.find_one({"_id": key.doc_id})
        except PyMongoError as exc:
            raise StorageError(f"could not read {EXTRACTIONS}: {exc}") from exc
        return None if doc is None else _stored(doc, output)

    async def keep(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> StoredResult:
        """Store ``answer`` unless an answer of ``key`` is stored already; return the stored one."""
        try:
            doc = await self._collection.find_one_and_update(
                {"_id": key.doc_id},
                {"$setOnInsert": _document(key, snapshot, answer, at)},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except PyMongoError as exc:
            raise StorageError(f"could not store the extraction result: {exc}") from exc
        stored = _stored(doc, type(answer.value)) if doc is not None else None
        return stored or StoredResult(answer.value, answer.model, answer.usage)

    async def replace(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> None:
        """Store ``answer`` in place of any earlier one (``--re-extract``)."""
        try:
            await self._collection.replace_one(
                {"_id": key.doc_id}, _document(key, snapshot, answer, at), upsert=True
            )
        except PyMongoError as exc:
            raise StorageError(f"could not store the extraction result: {exc}") from exc

    async def keys_of(self, snapshot_id: str, memory_type: str) -> list[ResultKey]:
        try:
            cursor = self._collection.find(
                {"snapshot_id": snapshot_id, "memory_type": memory_type}, {"value": 0}
            )
            return [_key(doc) for doc in await cursor.to_list()]
        except PyMongoError as exc:
            raise StorageError(f"could not read {EXTRACTIONS}: {exc}") from exc


@dataclass
class MemoryExtractionResults:
    """An :class:`AnswerStore` in a dict (tests), with the same first-answer-wins rule."""

    documents: dict[str, Document] = field(default_factory=dict)

    async def find(self, key: ResultKey, output: type[BaseModel]) -> StoredResult | None:
        doc = self.documents.get(key.doc_id)
        return None if doc is None else _stored(doc, output)

    async def keep(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> StoredResult:
        doc = self.documents.setdefault(key.doc_id, _document(key, snapshot, answer, at))
        return _stored(doc, type(answer.value)) or StoredResult(
            answer.value, answer.model, answer.usage
        )

    async def replace(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
    ) -> None:
        self.documents[key.doc_id] = _document(key, snapshot, answer, at)

    async def keys_of(self, snapshot_id: str, memory_type: str) -> list[ResultKey]:
        return [
            _key(doc)
            for doc in self.documents.values()
            if (doc["snapshot_id"], doc["memory_type"]) == (snapshot_id, memory_type)
        ]


def _key(doc: Document) -> ResultKey:
    return ResultKey(**{name: str(doc.get(name, "")) for name in ResultKey.__dataclass_fields__})


def _document(
    key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel], at: datetime
) -> Document:
    return {
        "_id": key.doc_id,
        **key.fields(),
        "project_id": snapshot.project_id,
        "user_id": snapshot.user_id,
        "session_id": snapshot.session_id,
        "value": answer.value.model_dump(mode="json"),
        "answer_model": answer.model,
        "prompt_tokens": answer.usage.prompt_tokens,
        "completion_tokens": answer.usage.completion_tokens,
        "at": at,
    }


def _stored(doc: Document, output: type[BaseModel]) -> StoredResult | None:
    try:
        value = output.model_validate(doc.get("value"))
    except ValidationError as exc:
        log.warning("stored extraction %s no longer fits %s: %s", doc["_id"], output.__name__, exc)
        return None
    usage = LLMUsage(
        prompt_tokens=int(doc.get("prompt_tokens", 0)),
        completion_tokens=int(doc.get("completion_tokens", 0)),
    )
    return StoredResult(value=value, answer_model=str(doc.get("answer_model", "")), usage=usage)
