"""What the store's helpers need of the store: its collections and its planner.

:mod:`mongomem.ltm.batch` (many candidates in a few bulk writes) and
:mod:`mongomem.ltm.deletes` (a DELETE version) are the parts of
:class:`~mongomem.ltm.store.MemoryStore` kept in their own modules. They are
written against these Protocols, which the store satisfies, so they never
import the store (and the store imports them without a cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from pymongo.asynchronous.collection import AsyncCollection

from mongomem.adapters.mongo import Capabilities
from mongomem.ltm.index import IndexCache
from mongomem.ltm.judge import StatedTimes
from mongomem.ltm.plan import Decision, Neighbour, Outcome, Thresholds
from mongomem.ltm.search import VectorSearch
from mongomem.models import MemoryCandidate

__all__ = ["BatchHost", "StoreCollections"]

Doc = dict[str, Any]


class StoreCollections(Protocol):
    """The memory collections and the index cache that follows them."""

    memories: AsyncCollection[Doc]
    decisions: AsyncCollection[Doc]
    scope_log: AsyncCollection[Doc]
    cache: IndexCache


class BatchHost(StoreCollections, Protocol):
    """Everything a batch reconciliation uses: the ledger, the planner, one-at-a-time apply."""

    ledger: AsyncCollection[Doc]
    thresholds: Thresholds
    capabilities: Capabilities
    search_backend: VectorSearch
    clock: Callable[[], datetime]
    ledger_ttl_s: float | None

    @property
    def bson_vectors(self) -> bool: ...

    async def reconcile(
        self, candidate: MemoryCandidate, *, fingerprint: str | None = None
    ) -> Outcome: ...

    async def reconcile_claimed(
        self, candidate: MemoryCandidate, claim: datetime | None
    ) -> Outcome: ...

    async def decide(
        self, candidate: MemoryCandidate, neighbours: list[Neighbour], *, judge: Any = ...
    ) -> Decision: ...

    @property
    def judge(self) -> Any: ...

    async def existing_times(self, neighbour: Neighbour) -> StatedTimes: ...

    async def record_decision(self, entry: Doc) -> None: ...
