""":class:`AsyncSpaces`: memory spaces of one project (SPEC H1, H6).

A space belongs to the project the :class:`AsyncSpaces` was opened for and is
shared by every agent of that project (SPEC H1: agents learn from each
other's cases); no call reaches another project's spaces or items (SPEC F3).
Agents register with :meth:`AsyncSpaces.attach_agent`, inheriting the space's
search keys or overriding them (SPEC H6). This module holds the space calls;
the item calls are in :mod:`mongomem.spaces.items` (episodic),
:mod:`mongomem.spaces.escalations` (escalations, playground) and
:mod:`mongomem.spaces.editing` (items one by one, feedback),
:mod:`mongomem.spaces.transfer` (export, import) and
:mod:`mongomem.spaces.rekey` (re-sealing under a new encryption key).

Every call validates all of its input before it writes anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import Embedder, make_embedder
from mongomem.adapters.mongo import Document, connect, database, reachable
from mongomem.errors import InputError, StateConflict
from mongomem.models import utcnow
from mongomem.settings import Settings
from mongomem.spaces.catalog import (
    KeysArg,
    agents_document,
    check_id,
    check_keys,
    check_recall,
    check_text,
    key_change_warning,
    space_document,
    space_from_doc,
)
from mongomem.spaces.crypto import SpacesSettings, keyring_from
from mongomem.spaces.editing import EditCalls
from mongomem.spaces.escalations import EscalationCalls
from mongomem.spaces.items import EpisodicCalls
from mongomem.spaces.keys import LLMSummariser, Summariser
from mongomem.spaces.models import RecallSettings, Space, SpaceKind, SpaceUpdate
from mongomem.spaces.rekey import RekeyCalls
from mongomem.spaces.store import SpaceStore
from mongomem.spaces.transfer import TransferCalls

__all__ = ["AsyncSpaces"]

#: The most spaces one page of :meth:`AsyncSpaces.list_spaces` holds, and its largest offset.
MAX_PAGE = 1000
MAX_OFFSET = 1_000_000


class AsyncSpaces(EpisodicCalls, EscalationCalls, EditCalls, TransferCalls, RekeyCalls):
    """Memory spaces of ``project_id``.

    ``embedder`` defaults to the configured provider, ``summariser`` (for
    files and long texts, SPEC H5) to an :class:`LLMSummariser` on the
    configured LLM, created on first need; ``spaces_settings`` (the
    encryption key and the previous ones) to ``settings.spaces``; ``clock`` to UTC now.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        project_id: str,
        embedder: Embedder | None = None,
        summariser: Summariser | None = None,
        spaces_settings: SpacesSettings | None = None,
        client: AsyncMongoClient[Document] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.project_id = check_id(project_id, "project_id")
        self._settings = settings
        self._embedder = embedder
        self._summariser = summariser
        self._keys = keyring_from(spaces_settings or settings.spaces)
        self._client = client
        self._own_client = client is None
        self._store: SpaceStore | None = None
        self._lock = asyncio.Lock()
        self._owned_llm: Any = None
        self.clock = clock

    # -- lifecycle ----------------------------------------------------------

    async def _ready(self) -> tuple[SpaceStore, Embedder]:
        async with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self._settings.embedding)
            if self._store is None:
                if self._client is None:
                    self._client = connect(self._settings.mongodb)
                await reachable(self._client, self._settings.mongodb)  # one timeout, not one a step
                store = SpaceStore(database(self._client, self._settings.mongodb), self._keys)
                await store.setup()
                self._store = store
            return self._store, self._embedder

    async def _summariser_now(self) -> Summariser:
        if self._summariser is None:
            from mongomem.adapters.llm import make_llm  # the OpenAI client: only when needed

            self._owned_llm = make_llm(self._settings.llm)
            self._summariser = LLMSummariser(self._owned_llm)
        return self._summariser

    async def close(self) -> None:
        if self._owned_llm is not None:
            await self._owned_llm.close()
            self._owned_llm = None
        if self._client is not None and self._own_client:
            await self._client.close()
        self._client, self._store = None, None

    async def __aenter__(self) -> AsyncSpaces:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- spaces (SPEC H1) ---------------------------------------------------

    async def _space(self, space_id: str) -> Space:
        store, _ = await self._ready()
        doc = await store.get_space(self.project_id, check_id(space_id, "space_id"))
        if doc is None:
            raise InputError(f"no space {space_id!r} in this project", field="space_id")
        return space_from_doc(doc)

    async def create_space(
        self,
        space_id: str,
        *,
        keys: KeysArg,
        name: str | None = None,
        description: str = "",
        kind: SpaceKind = "episodic",
        recall: RecallSettings | Mapping[str, Any] | None = None,
        encrypted: bool = False,
    ) -> Space:
        """A new space. ``encrypted`` is fixed now: it can never be changed."""
        check_id(space_id, "space_id")
        if kind not in ("episodic", "escalation"):
            raise InputError("kind must be 'episodic' or 'escalation'", field="kind")
        if not isinstance(encrypted, bool):
            raise InputError("encrypted must be true or false", field="encrypted")
        now = self.clock()
        space = Space(
            project_id=self.project_id,
            space_id=space_id,
            name=check_text(
                name if name is not None else space_id, "name", max_chars=200, allow_empty=False
            ),
            description=check_text(description, "description", max_chars=4000),
            kind=kind,
            encrypted=encrypted,
            keys=check_keys(keys),
            recall=check_recall(recall if recall is not None else {}),
            embedder="",
            dimensions=0,
            created_at=now,
            updated_at=now,
        )
        if encrypted and self._keys.current is None:  # the caller asked: a 409, not a 500
            raise StateConflict(
                "an encrypted space needs a key, and this deployment has none: set "
                "MONGOMEM_SPACES_ENCRYPTION_KEY (32 bytes, base64), or create it unencrypted",
                field="encrypted",
            )
        store, embedder = await self._ready()
        key_id = self._keys.current.key_id if encrypted and self._keys.current is not None else None
        space = space.model_copy(
            update={"embedder": embedder.name, "dimensions": embedder.dimensions, "key_id": key_id}
        )
        await store.insert_space(space_document(space))
        return space

    async def get_space(self, space_id: str) -> Space:
        """One space, with its current item count."""
        space = await self._space(space_id)
        store, _ = await self._ready()
        count = await store.count_items(self.project_id, space.space_id)
        return space.model_copy(update={"item_count": count})

    async def list_spaces(self, *, limit: int | None = None, offset: int = 0) -> list[Space]:
        """The project's spaces by id, with their item counts: ``limit`` of them from the
        ``offset``-th (a page; every space without ``limit``)."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE
        ):
            raise InputError(f"limit: a whole number from 1 to {MAX_PAGE}", field="limit")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
            raise InputError(f"offset: a whole number from 0 to {MAX_OFFSET}", field="offset")
        store, _ = await self._ready()
        docs = await store.list_spaces(self.project_id, limit, offset)
        return [
            space_from_doc(d, await store.count_items(self.project_id, d["space_id"])) for d in docs
        ]

    async def update_space(
        self,
        space_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        recall: RecallSettings | Mapping[str, Any] | None = None,
        keys: KeysArg | None = None,
        encrypted: bool | None = None,
        confirm: bool = False,
    ) -> SpaceUpdate:
        """Edit a space. A change of its keys is applied only with ``confirm=True``;
        without it nothing is changed and the warning lists the agents affected."""
        space = await self._space(space_id)
        if encrypted is not None and encrypted != space.encrypted:
            raise InputError(
                "encryption is chosen when a space is created and cannot be changed; export "
                "the space and import it into a new one with the encryption you want",
                field="encrypted",
            )
        changes: dict[str, Any] = {}
        if name is not None:
            changes["name"] = check_text(name, "name", max_chars=200, allow_empty=False)
        if description is not None:
            changes["description"] = check_text(description, "description", max_chars=4000)
        if recall is not None:
            changes["recall"] = check_recall(recall, space.recall).model_dump()
        new_keys = check_keys(keys) if keys is not None else None
        if new_keys is not None and new_keys != space.keys:
            warning, affected = key_change_warning(space, new_keys)
            if not confirm:
                return SpaceUpdate(
                    space=space, applied=False, warning=warning, affected_agents=affected
                )
            changes["keys"] = [k.model_dump() for k in new_keys]
        else:
            warning, affected = None, ()
        store, _ = await self._ready()
        if changes:
            changes["updated_at"] = self.clock()
            await store.set_space(self.project_id, space.space_id, changes)
        return SpaceUpdate(
            space=await self.get_space(space.space_id),
            applied=True,
            warning=warning,
            affected_agents=affected,
        )

    async def delete_space(self, space_id: str) -> int:
        """Delete a space and all of its items; returns how many items went."""
        space = await self._space(space_id)
        store, _ = await self._ready()
        return await store.delete_space(self.project_id, space.space_id)

    # -- agents (SPEC H6) ---------------------------------------------------

    async def attach_agent(
        self, space_id: str, agent_id: str, *, keys: KeysArg | None = None
    ) -> Space:
        """Register an agent of the space: it inherits the space's keys, or uses ``keys``."""
        check_id(agent_id, "agent_id")
        own = check_keys(keys, "keys") if keys is not None else None
        space = await self._space(space_id)
        agents = {**space.agents, agent_id: own}
        store, _ = await self._ready()
        await store.set_space(
            self.project_id,
            space.space_id,
            {"agents": agents_document(agents), "updated_at": self.clock()},
        )
        return await self.get_space(space.space_id)

    async def detach_agent(self, space_id: str, agent_id: str) -> Space:
        check_id(agent_id, "agent_id")
        space = await self._space(space_id)
        if agent_id not in space.agents:
            raise StateConflict(
                f"agent {agent_id!r} is not attached to this space", field="agent_id"
            )
        agents = {a: k for a, k in space.agents.items() if a != agent_id}
        store, _ = await self._ready()
        await store.set_space(
            self.project_id,
            space.space_id,
            {"agents": agents_document(agents), "updated_at": self.clock()},
        )
        return await self.get_space(space.space_id)
