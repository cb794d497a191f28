"""How a :class:`~mongomem.models.MemoryVersion` is stored in ``memories``.

One document per version, ``_id`` = ``version_id``. Besides the model's
fields a document carries ``key_norm`` (the indexed form of the key),
``candidate_id`` (the candidate that wrote this version) and ``candidate_ids``
(that one plus every candidate that reinforced it) — the store's idempotence
rests on those. ``reinforcement_count`` is not stored: it is the number of
``candidate_ids``, which makes a reinforcement idempotent (``$addToSet``). Embeddings are
stored compactly as little-endian float32 bytes
(BSON binary), or as a BSON vector (subtype 9) where ``$vectorSearch`` is used.
A version written by an import (:mod:`mongomem.ltm.export`) carries ``import_id``
until its import commits, and ``evidence_turns`` (the turn ids of evidence whose
snapshot the database does not hold); neither is part of the model. Nor are
``observed_rank`` (the evidence order of its latest evidence, SPEC L2) and
``head`` (on a current version: the memory's highest version number once a
history version was written after it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bson.binary import Binary, BinaryVectorDtype

from mongomem.lazy import lazy_module
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.plan import version_rank
from mongomem.models import MemoryVersion

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = [
    "STORED_ONLY",
    "decode_embedding",
    "encode_embedding",
    "from_document",
    "scope_filter",
    "to_document",
]

#: Document fields that are not part of the model.
STORED_ONLY = (
    "_id",
    "key_norm",
    "candidate_id",
    "candidate_ids",
    "variants",
    "import_id",
    "evidence_turns",
    "observed_rank",
    "head",
    "supersedes",
)


def encode_embedding(vector: Sequence[float], *, bson_vector: bool = False) -> Binary | bytes:
    if bson_vector:
        return Binary.from_vector(list(vector), BinaryVectorDtype.FLOAT32)
    return np.asarray(vector, dtype="<f4").tobytes()


def decode_embedding(raw: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A float32 vector from either stored form (or a plain array of numbers)."""
    if isinstance(raw, Binary) and raw.subtype == 9:
        return np.asarray(raw.as_vector().data, dtype=np.float32)
    if isinstance(raw, bytes | bytearray | memoryview):
        return np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)
    return np.asarray(raw, dtype=np.float32)


def scope_filter(project_id: str, user_id: str | None) -> dict[str, Any]:
    return {"scope.project_id": project_id, "scope.user_id": user_id}


def to_document(
    version: MemoryVersion, candidate_id: str, *, bson_vector: bool = False
) -> dict[str, Any]:
    doc = version.model_dump(mode="python", exclude={"embedding", "version_id"})
    doc["_id"] = version.version_id
    doc["status"] = version.status.value
    doc["action"] = version.action.value
    doc["embedding"] = encode_embedding(version.embedding, bson_vector=bson_vector)
    doc["key_norm"] = normalize_key(version.key)
    doc["candidate_id"] = candidate_id
    doc["candidate_ids"] = [candidate_id]
    doc["observed_rank"] = version_rank(version)
    if version.event is not None:  # BSON has no date type: calendar dates as ISO text
        doc["event"] = version.event.model_dump(mode="json")
    del doc["reinforcement_count"]
    return doc


def from_document(doc: dict[str, Any]) -> MemoryVersion:
    data = {k: v for k, v in doc.items() if k not in STORED_ONLY}
    data["version_id"] = doc["_id"]
    data["reinforcement_count"] = max(1, len(doc.get("candidate_ids", ())))
    raw = doc.get("embedding")  # absent when a read projected it out
    data["embedding"] = () if raw is None else tuple(float(x) for x in decode_embedding(raw))
    if "variants" in doc:
        data["fields"] = {**doc.get("fields", {}), "variants": list(doc["variants"])}
    return MemoryVersion.model_validate(data)
