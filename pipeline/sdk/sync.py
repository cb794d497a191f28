"""The synchronous SDK: :class:`Memory`, for plain (non-async) code.

Each :class:`Memory` runs a private event loop in a daemon thread and the
async SDK inside it; a sync call submits the coroutine there and waits. That
works from any thread, and also from code that already runs an event loop
(the caller's loop is merely blocked for the call, like any blocking I/O).
Close the memory (or use it as a context manager) to stop the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Generic, Protocol, Self, TypeVar

from mongomem.adapters.embeddings import Embedder
from mongomem.adapters.tls import Verify
from mongomem.erasure.erase import ErasureResult
from mongomem.ltm import Judge, Thresholds
from mongomem.ltm.export import ExportResult, ImportResult
from mongomem.models import Role, SessionEnd, Turn
from mongomem.operations.progress import ProcessingStatus
from mongomem.sdk.client import DEFAULT_CONTEXT_TYPES, AsyncBoundMemory, AsyncMemory
from mongomem.sdk.export_io import ExportSink, ImportSource
from mongomem.sdk.models import (
    DeleteResult,
    Episode,
    MemoryContext,
    MemoryItem,
    MemoryPage,
    MemoryRequestContext,
    Procedure,
    SaveResult,
    SearchHit,
    SemanticMemory,
    TaxonomicTerm,
    VersionRecord,
)
from mongomem.sdk.transport import MemoryTransport
from mongomem.settings import Settings
from mongomem.stm.search import TurnHit
from mongomem.stm.turns import SessionPage, SessionSummary, TurnPage

__all__ = ["BoundMemory", "LoopThread", "Memory", "SyncClient"]

T = TypeVar("T")

log = logging.getLogger(__name__)


class LoopThread:
    """An event loop running forever in a daemon thread; :meth:`call` runs a coroutine
    there and waits (shared by the sync wrappers: :class:`Memory`, and
    ``mongomem.sdk.spaces.Spaces``)."""

    def __init__(self, name: str = "mongomem-sdk") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync Memory call was made from inside its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Cancel what still runs on the loop, let it finish, then stop and close the loop."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            with contextlib.suppress(Exception):  # a loop that will not drain is stopped anyway
                asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


async def _drain() -> None:
    """Cancel every other task of the running loop and wait for them (background tasks)."""
    loop = asyncio.get_running_loop()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.shutdown_asyncgens()


_LoopThread = LoopThread  # the old private name keeps working


class _Closable(Protocol):
    async def close(self) -> None: ...


A = TypeVar("A", bound=_Closable)


class SyncClient(Generic[A]):
    """An async client run on a loop thread of its own: the base of the blocking clients.

    ``make`` builds the async client on that loop; every call of the
    subclass goes through :meth:`_call` (bounded by ``timeout_s``), and
    :meth:`close` closes the async client, then stops the thread.
    """

    def __init__(
        self,
        make: Callable[[], Coroutine[Any, Any, A]],
        timeout_s: float | None,
        thread_name: str | None = None,
    ) -> None:
        self._runner = LoopThread(thread_name or "mongomem-sdk")
        self._timeout = timeout_s
        try:
            self._async: A = self._runner.call(make(), timeout_s)
        except BaseException:
            self._runner.stop()
            raise
        # Also at interpreter exit for a client that was never closed: close the
        # async client (and its driver's background tasks) on its loop, then stop.
        self._finalizer = weakref.finalize(self, _shut_down, self._runner, self._async)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.call(coro, self._timeout)

    def close(self) -> None:
        if not self._finalizer.alive:
            return
        self._finalizer.detach()
        try:
            self._call(self._async.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shut_down(runner: LoopThread, client: _Closable) -> None:
    """Close ``client`` on ``runner``'s loop and stop it; errors are dropped (nobody to tell)."""
    try:
        if runner.thread.is_alive() and not runner.loop.is_closed():
            runner.call(client.close(), timeout=10)
    except Exception:  # at exit or at garbage collection; stop the loop all the same
        log.debug("closing an unclosed client failed", exc_info=True)
    finally:
        runner.stop()


class Memory(SyncClient[AsyncMemory]):
    """Long-term (and short-term) memory of one project, for synchronous code.

    Same arguments as :class:`~mongomem.sdk.AsyncMemory`; ``timeout_s`` bounds
    every call.
    """

    def __init__(
        self,
        *,
        project_id: str,
        api_key: str | None = None,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        judge: Judge | None = None,
        thresholds: Thresholds | None = None,
        transport: MemoryTransport | None = None,
        base_url: str | None = None,
        verify: Verify = True,
        timeout_s: float | None = 120.0,
    ) -> None:
        async def make() -> AsyncMemory:
            return AsyncMemory(
                project_id=project_id,
                api_key=api_key,
                settings=settings,
                embedder=embedder,
                judge=judge,
                thresholds=thresholds,
                transport=transport,
                base_url=base_url,
                verify=verify,
            )

        super().__init__(make, timeout_s)

    @property
    def project_id(self) -> str:
        return self._async.project_id

    def bind(self, ctx: MemoryRequestContext) -> BoundMemory:
        return BoundMemory(self, self._async.bind(ctx))

    def erase_user(self, user_id: str, *, confirm: bool = False) -> ErasureResult:
        """See :meth:`AsyncMemory.erase_user <mongomem.sdk.AsyncMemory.erase_user>`."""
        return self._call(self._async.erase_user(user_id, confirm=confirm))

    def erase_session(
        self, user_id: str, session_id: str, *, confirm: bool = False
    ) -> ErasureResult:
        """See :meth:`AsyncMemory.erase_session <mongomem.sdk.AsyncMemory.erase_session>`."""
        return self._call(self._async.erase_session(user_id, session_id, confirm=confirm))

    def erase_project(self, *, confirm: bool = False) -> ErasureResult:
        """See :meth:`AsyncMemory.erase_project <mongomem.sdk.AsyncMemory.erase_project>`."""
        return self._call(self._async.erase_project(confirm=confirm))

    def export_user(self, user_id: str, out: ExportSink) -> ExportResult:
        """See :meth:`AsyncMemory.export_user <mongomem.sdk.AsyncMemory.export_user>`.

        Not bounded by ``timeout_s`` (an export takes as long as the user's memory)."""
        return self._runner.call(self._async.export_user(user_id, out), None)

    def import_user(self, source: ImportSource, *, user_id: str) -> ImportResult:
        """See :meth:`AsyncMemory.import_user <mongomem.sdk.AsyncMemory.import_user>`
        (not bounded by ``timeout_s``)."""
        return self._runner.call(self._async.import_user(source, user_id=user_id), None)


class BoundMemory:
    """The synchronous twin of :class:`~mongomem.sdk.AsyncBoundMemory`."""

    def __init__(self, memory: Memory, inner: AsyncBoundMemory) -> None:
        self._m = memory
        self._inner = inner
        self.identity = inner.identity

    def save_semantic(
        self, label: str, text: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        return self._m._call(
            self._inner.save_semantic(label, text, idempotency_key=idempotency_key)
        )

    def get_semantic(self, label: str) -> SemanticMemory | None:
        return self._m._call(self._inner.get_semantic(label))

    def search_semantic(
        self,
        query: str,
        limit: int = 5,
        *,
        as_of: datetime | None = None,
        subject: str | None = None,
    ) -> list[SearchHit[SemanticMemory]]:
        return self._m._call(
            self._inner.search_semantic(query, limit, as_of=as_of, subject=subject)
        )

    def save_episode(
        self, title: str, content: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        return self._m._call(
            self._inner.save_episode(title, content, idempotency_key=idempotency_key)
        )

    def search_episodes(
        self,
        query: str,
        limit: int = 5,
        *,
        as_of: datetime | None = None,
        subject: str | None = None,
    ) -> list[SearchHit[Episode]]:
        return self._m._call(
            self._inner.search_episodes(query, limit, as_of=as_of, subject=subject)
        )

    def list_episodes(self, limit: int = 50) -> list[Episode]:
        return self._m._call(self._inner.list_episodes(limit))

    def save_procedure(
        self,
        procedure: str,
        description: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> SaveResult:
        return self._m._call(
            self._inner.save_procedure(
                procedure, description, content, idempotency_key=idempotency_key
            )
        )

    def discover_procedures(self, query: str, limit: int = 5) -> list[SearchHit[Procedure]]:
        return self._m._call(self._inner.discover_procedures(query, limit))

    def get_procedure(self, name: str) -> Procedure | None:
        return self._m._call(self._inner.get_procedure(name))

    def save_taxonomic(
        self, domain: str, term: str, definition: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        return self._m._call(
            self._inner.save_taxonomic(domain, term, definition, idempotency_key=idempotency_key)
        )

    def get_taxonomic_term(self, domain: str, term: str) -> TaxonomicTerm | None:
        return self._m._call(self._inner.get_taxonomic_term(domain, term))

    def search_taxonomic(
        self, query: str, domain: str | None = None, limit: int = 5
    ) -> list[SearchHit[TaxonomicTerm]]:
        return self._m._call(self._inner.search_taxonomic(query, domain, limit))

    def list_domains(self) -> list[str]:
        return self._m._call(self._inner.list_domains())

    def build_context(
        self,
        query: str,
        *,
        include: Sequence[str] = DEFAULT_CONTEXT_TYPES,
        limit_per_type: int = 5,
        max_chars: int = 4000,
        min_score: float | None = None,
        as_of: datetime | None = None,
        subject: str | None = None,
        include_turns: int = 0,
    ) -> MemoryContext:
        return self._m._call(
            self._inner.build_context(
                query,
                include=include,
                limit_per_type=limit_per_type,
                max_chars=max_chars,
                min_score=min_score,
                as_of=as_of,
                subject=subject,
                include_turns=include_turns,
            )
        )

    def search_turns(
        self,
        query: str,
        limit: int = 10,
        *,
        sessions: Sequence[str] | None = None,
        speaker: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        neighbours: int = 0,
        as_of: datetime | None = None,
    ) -> list[TurnHit]:
        """See :meth:`mongomem.sdk.AsyncBoundMemory.search_turns`."""
        return self._m._call(
            self._inner.search_turns(
                query,
                limit,
                sessions=sessions,
                speaker=speaker,
                since=since,
                until=until,
                neighbours=neighbours,
                as_of=as_of,
            )
        )

    def history(self, memory_id: str, *, as_of: datetime | None = None) -> list[VersionRecord]:
        return self._m._call(self._inner.history(memory_id, as_of=as_of))

    def value_as_of(self, memory_id: str, at: datetime) -> VersionRecord | None:
        return self._m._call(self._inner.value_as_of(memory_id, at))

    def delete_memory(self, memory_id: str, *, reason: str | None = None) -> DeleteResult | None:
        return self._m._call(self._inner.delete_memory(memory_id, reason=reason))

    def delete_by_key(
        self, memory_type: str, key: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        return self._m._call(self._inner.delete_by_key(memory_type, key, reason=reason))

    def delete_semantic(self, label: str, *, reason: str | None = None) -> DeleteResult | None:
        return self._m._call(self._inner.delete_semantic(label, reason=reason))

    def delete_episode(self, title: str, *, reason: str | None = None) -> DeleteResult | None:
        return self._m._call(self._inner.delete_episode(title, reason=reason))

    def delete_procedure(self, name: str, *, reason: str | None = None) -> DeleteResult | None:
        return self._m._call(self._inner.delete_procedure(name, reason=reason))

    def delete_taxonomic_term(
        self, domain: str, term: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        return self._m._call(self._inner.delete_taxonomic_term(domain, term, reason=reason))

    def browse_memories(
        self,
        memory_type: str | None = None,
        *,
        status: str = "current",
        updated_since: datetime | None = None,
        key_prefix: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        return self._m._call(
            self._inner.browse_memories(
                memory_type,
                status=status,
                updated_since=updated_since,
                key_prefix=key_prefix,
                limit=limit,
                cursor=cursor,
            )
        )

    def count_memories(
        self,
        memory_type: str | None = None,
        *,
        status: str = "current",
        updated_since: datetime | None = None,
        key_prefix: str | None = None,
    ) -> int:
        return self._m._call(
            self._inner.count_memories(
                memory_type, status=status, updated_since=updated_since, key_prefix=key_prefix
            )
        )

    def get_memory(self, memory_id: str) -> MemoryItem | None:
        return self._m._call(self._inner.get_memory(memory_id))

    def browse_sessions(
        self, *, limit: int = 100, cursor: str | None = None, active_since: datetime | None = None
    ) -> SessionPage:
        return self._m._call(
            self._inner.browse_sessions(limit=limit, cursor=cursor, active_since=active_since)
        )

    def browse_turns(self, *, limit: int = 100, cursor: str | None = None) -> TurnPage:
        return self._m._call(self._inner.browse_turns(limit=limit, cursor=cursor))

    def processing_status(self) -> ProcessingStatus:
        return self._m._call(self._inner.processing_status())

    def wait_until_processed(
        self, timeout: float = 60.0, *, all_turns: bool = False, poll_s: float = 0.25
    ) -> ProcessingStatus:
        """As :meth:`AsyncBoundMemory.wait_until_processed`; ``timeout`` also bounds the call
        (the memory's ``timeout_s`` does not cut a longer wait short)."""
        return self._m._runner.call(
            self._inner.wait_until_processed(timeout, all_turns=all_turns, poll_s=poll_s),
            timeout + 30.0,
        )

    def record_turn(
        self,
        role: Role | str,
        content: str,
        metadata: dict[str, Any] | None = None,
        *,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        return self._m._call(
            self._inner.record_turn(role, content, metadata, at=at, speaker=speaker)
        )

    def recent_turns(self, limit: int = 50) -> list[Turn]:
        return self._m._call(self._inner.recent_turns(limit))

    def end_session(self) -> SessionEnd:
        """See :meth:`AsyncBoundMemory.end_session <mongomem.sdk.AsyncBoundMemory.end_session>`."""
        return self._m._call(self._inner.end_session())

    def list_sessions(self, limit: int = 100) -> list[SessionSummary]:
        return self._m._call(self._inner.list_sessions(limit))
