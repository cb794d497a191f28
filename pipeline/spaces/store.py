"""MongoDB adapter of memory spaces: collections ``spaces`` and ``space_items``.

``spaces`` holds one document per (project, space): ``_id`` is
``stable_id("space", project_id, space_id)`` and a unique index on
``(project_id, space_id)`` keeps names unique per project. ``space_items``
holds one document per item::

    {_id: item_id, project_id, space_id, kind, agent_id, source, created_at,
     updated_at, vectors: {argument: float32 bytes},
     payload: "<JSON text>"          # plain spaces
     sealed: <AES-GCM bytes>,        # encrypted spaces (see mongomem.spaces.crypto)
     key_id: "<fingerprint>"}        # the key that sealed it (absent on older items:
                                     # then the space's key_id)

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

from mongomem.adapters.mongo import Document
from mongomem.errors import InputError, StateConflict, StorageError
from mongomem.ltm.documents import decode_embedding, encode_embedding
from mongomem.spaces.crypto import Keyring
from mongomem.spaces.models import Space, SpaceItem

__all__ = ["ITEMS", "MAX_PAYLOAD_BYTES", "SPACES", "SpaceStore", "Vectors"]

SPACES = "spaces"
ITEMS = "space_items"
#: Largest payload of one item, as JSON (well below MongoDB's 16 MiB document limit).
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
_PAYLOAD = ("inputs", "key_texts", "outputs", "outcome", "resolution", "sentiment", "feedback")

Vectors = dict[str, list[float]]


class SpaceStore:
    """Reads and writes spaces and their items; seals and opens with ``keys`` where needed."""

    def __init__(self, db: AsyncDatabase[Document], keys: Keyring) -> None:
        self.spaces: AsyncCollection[Document] = db[SPACES]
        self.items: AsyncCollection[Document] = db[ITEMS]
        self.keys = keys

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
            raise StateConflict(
                f"space {doc['space_id']!r} already exists in this project", field="space_id"
            ) from exc
        except PyMongoError as exc:
            raise StorageError(f"could not store the space: {exc}") from exc

    async def get_space(self, project_id: str, space_id: str) -> Document | None:
        try:
            return await self.spaces.find_one({"project_id": project_id, "space_id": space_id})
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc

    async def list_spaces(
        self, project_id: str, limit: int | None = None, offset: int = 0
    ) -> list[Document]:
        """The project's spaces by id: ``limit`` of them from the ``offset``-th (all without)."""
        try:
            cursor = self.spaces.find({"project_id": project_id}).sort("space_id", ASCENDING)
            cursor = cursor.skip(offset)
            return await cursor.to_list(limit)
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
            "_id": item.item_id,
            "project_id": project_id,
            "space_id": item.space_id,
            "kind": item.kind,
            "agent_id": item.agent_id,
            "source": dict(item.source),
            "created_at": item.created_at,
            "updated_at": item.updated_at,
            "vectors": {arg: encode_embedding(v) for arg, v in vectors.items()},
        }
        if not space.encrypted:
            doc["payload"] = text
        else:
            cipher = self.keys.sealer()
            doc["sealed"] = cipher.seal(
                payload, project_id=project_id, space_id=item.space_id, item_id=item.item_id
            )
            doc["key_id"] = cipher.key_id
        return doc

    def open_payload(self, space: Space, doc: Document) -> dict[str, Any]:
        """A sealed item's payload, opened with the key its fingerprint names (the
        item's own, or for an item stored before items carried one, the space's)."""
        key_id = doc.get("key_id") or space.key_id
        cipher = self.keys.opener(key_id, sealed=f"item {doc['_id']} of space {doc['space_id']!r}")
        return cipher.open(
            bytes(doc["sealed"]),
            project_id=doc["project_id"],
            space_id=doc["space_id"],
            item_id=doc["_id"],
        )

    def read_item(self, space: Space, doc: Document) -> tuple[SpaceItem, Vectors]:
        payload: dict[str, Any] = (
            self.open_payload(space, doc) if space.encrypted else json.loads(doc["payload"])
        )
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

    async def items_not_under(
        self, project_id: str, space_id: str, key_id: str, *, after: str | None, limit: int
    ) -> list[Document]:
        """Up to ``limit`` items of the space not marked as sealed under ``key_id`` (older
        items, with no mark, included), by id, from just after ``after``."""
        query: Document = {
            "project_id": project_id,
            "space_id": space_id,
            "key_id": {"$ne": key_id},
        }
        if after is not None:
            query["_id"] = {"$gt": after}
        fields = {"project_id": 1, "space_id": 1, "sealed": 1, "key_id": 1}
        try:
            cursor = self.items.find(query, fields).sort("_id", ASCENDING).limit(limit)
            return await cursor.to_list()
        except PyMongoError as exc:
            raise StorageError(f"MongoDB read failed: {exc}") from exc

    async def reseal_item(self, doc: Document, sealed: bytes, key_id: str) -> bool:
        """Swap an item's ciphertext and key mark, only if its ciphertext is still the one
        in ``doc`` (a fresh nonce makes each one unique): a compare-and-swap, so a
        concurrent write is never overwritten. ``False`` when it was rewritten or deleted."""
        try:
            done = await self.items.update_one(
                {
                    "_id": doc["_id"],
                    "project_id": doc["project_id"],
                    "space_id": doc["space_id"],
                    "sealed": doc["sealed"],
                },
                {"$set": {"sealed": sealed, "key_id": key_id}},
            )
        except PyMongoError as exc:
            raise StorageError(f"could not re-seal the item: {exc}") from exc
        return done.matched_count == 1

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
