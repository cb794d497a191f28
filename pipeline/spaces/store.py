"""MongoDB adapter of memory spaces: collections ``spaces`` and ``space_items``.

``spaces`` holds one document per (project, space): ``_id`` is
``stable_id("space", project_id, space_id)`` and a unique index on
``(project_id, space_id)`` keeps names unique per project. ``space_items``
holds one document per item::

    {_id: item_id, project_id, space_id, kind, agent_id, source, created_at,
     updated_at, vectors: {argument: float32 bytes},
     payload: "<JSON text>"          # plain spaces
     sealed: <AES-GCM bytes>}        # encrypted spaces (see pipeline.spaces.crypto)

The payload (inputs, key texts, outputs, outcome, resolution, sentiment,
feedback) is stored as JSON text so that arbitrary output keys never become
MongoDB field names. Every query filters on ``project_id`` (SPEC F3). No
multi-document transactions are used (the servers may not have them): where
an operation writes several documents, the module that calls it says in
which order and what a crash in between leaves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from pipeline.errors import ConfigError, InputError, StorageError
from pipeline.ltm.documents import decode_embedding, encode_embedding
from pipeline.mongo import Document
from pipeline.spaces.crypto import PayloadCipher
from pipeline.spaces.models import Space, SpaceItem

__all__ = ["ITEMS", "MAX_PAYLOAD_BYTES", "SPACES", "SpaceStore", "Vectors"]

SPACES = "spaces"
ITEMS = "space_items"
#: Largest payload of one item, as JSON (well below MongoDB's 16 MiB document limit).
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
_PAYLOAD = ("inputs", "key_texts", "outputs", "outcome", "resolution", "sentiment", "feedback")

Vectors = dict[str, list[float]]


class SpaceStore:
    """Reads and writes spaces and their items; decrypts with ``cipher`` where needed."""

    def __init__(self, db: AsyncDatabase[Document], cipher: PayloadCipher | None) -> None:
        self.spaces: AsyncCollection[Document] = db[SPACES]
        self.items: AsyncCollection[Document] = db[ITEMS]
        self.cipher = cipher

    async def setup(self) -> None:
        try:
            await self.spaces.create_index(
                [("project_id", ASCENDING), ("space_id", ASCENDING)], unique=True
            )
            await self.items.create_index([("project_id", ASCENDING), ("space_id", ASCENDING)])
        except PyMongoError as exc:
            raise StorageError(f"could not create the spaces indexes: {exc}") from exc

    # -- spaces -------------------------------------------------------------

    async def insert_space(self, doc: Document) -> None:
        try:
            await self.spaces.insert_one(doc)
        except DuplicateKeyError as exc:
            raise InputError(
                f"space {doc['space_id']!r} already exists in this project", field="space_id"
            ) from exc
        except PyMongoError as exc:
            raise StorageError(f"could not store the space: {exc}") from exc

    async def get_space(self, project_id: str, space_id: str) -> Document | None:
        try:
            return await self.spaces.find_one({"project_id": project_id, "space_id": space_id})
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc

    async def list_spaces(self, project_id: str) -> list[Document]:
        try:
            cursor = self.spaces.find({"project_id": project_id}).sort("space_id", ASCENDING)
            return await cursor.to_list()
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc

    async def set_space(self, project_id: str, space_id: str, fields: Document) -> None:
        try:
            await self.spaces.update_one(
                {"project_id": project_id, "space_id": space_id}, {"$set": fields}
            )
        except PyMongoError as exc:
            raise StorageError(f"could not update the space: {exc}") from exc

    async def delete_space(self, project_id: str, space_id: str) -> int:
        """Items first, then the space: a crash in between leaves an emptied space."""
        try:
            gone = await self.items.delete_many({"project_id": project_id, "space_id": space_id})
            await self.spaces.delete_one({"project_id": project_id, "space_id": space_id})
        except PyMongoError as exc:
            raise StorageError(f"could not delete the space: {exc}") from exc
        return gone.deleted_count

    async def count_items(self, project_id: str, space_id: str) -> int:
        try:
            return await self.items.count_documents(
                {"project_id": project_id, "space_id": space_id}
            )
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc

    # -- items --------------------------------------------------------------

    def _cipher_for(self, encrypted: bool, key_id: str | None) -> PayloadCipher | None:
        if not encrypted:
            return None
        if self.cipher is None:
            raise ConfigError(
                "this space is encrypted: set MONGOMEM_SPACES_ENCRYPTION_KEY to read or write it"
            )
        if key_id is not None and key_id != self.cipher.key_id:
            raise ConfigError(
                "MONGOMEM_SPACES_ENCRYPTION_KEY is not the key this space was created with"
            )
        return self.cipher

    def item_document(
        self, project_id: str, space: Space, item: SpaceItem, vectors: Vectors
    ) -> Document:
        """The stored form of ``item`` (payload sealed when the space is encrypted)."""
        payload = item.model_dump(mode="json", include=set(_PAYLOAD))
        text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode()) > MAX_PAYLOAD_BYTES:
            raise InputError(
                f"the item is larger than {MAX_PAYLOAD_BYTES} bytes as JSON", field="outputs"
            )
        doc: Document = {
            "_id": item.item_id, "project_id": project_id, "space_id": item.space_id,
            "kind": item.kind, "agent_id": item.agent_id, "source": dict(item.source),
            "created_at": item.created_at, "updated_at": item.updated_at,
            "vectors": {arg: encode_embedding(v) for arg, v in vectors.items()},
        }  # fmt: skip
        cipher = self._cipher_for(space.encrypted, space.key_id)
        if cipher is None:
            doc["payload"] = text
        else:
            doc["sealed"] = cipher.seal(
                payload, project_id=project_id, space_id=item.space_id, item_id=item.item_id
            )
        return doc

    def read_item(self, space: Space, doc: Document) -> tuple[SpaceItem, Vectors]:
        cipher = self._cipher_for(space.encrypted, space.key_id)
        if cipher is None:
            payload: dict[str, Any] = json.loads(doc["payload"])
        else:
            payload = cipher.open(
                bytes(doc["sealed"]),
                project_id=doc["project_id"], space_id=doc["space_id"], item_id=doc["_id"],
            )  # fmt: skip
        item = SpaceItem.model_validate(
            {
                **payload,
                "item_id": doc["_id"],
                "space_id": doc["space_id"],
                "kind": doc["kind"],
                "agent_id": doc.get("agent_id"),
                "source": doc.get("source") or {},
                "created_at": doc["created_at"],
                "updated_at": doc["updated_at"],
            }
        )
        vectors = {a: decode_embedding(raw).tolist() for a, raw in doc["vectors"].items()}
        return item, vectors

    async def insert_items(self, docs: Sequence[Document]) -> None:
        if not docs:
            return
        try:
            await self.items.insert_many(list(docs), ordered=True)
        except PyMongoError as exc:
            raise StorageError(f"could not store the item: {exc}") from exc

    async def replace_item(self, doc: Document) -> None:
        try:
            await self.items.replace_one(
                {"_id": doc["_id"], "project_id": doc["project_id"], "space_id": doc["space_id"]},
                doc,
            )
        except PyMongoError as exc:
            raise StorageError(f"could not update the item: {exc}") from exc

    async def delete_items(self, project_id: str, space_id: str, item_ids: Sequence[str]) -> int:
        try:
            gone = await self.items.delete_many(
                {"project_id": project_id, "space_id": space_id, "_id": {"$in": list(item_ids)}}
            )
        except PyMongoError as exc:
            raise StorageError(f"could not delete items: {exc}") from exc
        return gone.deleted_count

    async def find_items(
        self, project_id: str, space: Space, item_ids: Sequence[str] | None = None
    ) -> list[tuple[SpaceItem, Vectors]]:
        """The space's items (all, or those of ``item_ids``), oldest first."""
        query: Document = {"project_id": project_id, "space_id": space.space_id}
        if item_ids is not None:
            query["_id"] = {"$in": list(item_ids)}
        try:
            docs = await self.items.find(query).sort("created_at", ASCENDING).to_list()
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc
        return [self.read_item(space, d) for d in docs]
