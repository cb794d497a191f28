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
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar

from mongomem.adapters.embeddings import Embedder
from mongomem.erasure.erase import ErasureResult
from mongomem.ltm import Judge, Thresholds
from mongomem.ltm.export import ExportResult, ImportResult
from mongomem.operations.progress import ProcessingStatus
from mongomem.sdk.client import AsyncBoundMemory, AsyncMemory
from mongomem.sdk.export_io import ExportSink, ImportSource
from mongomem.sdk.models import (
    MemoryRequestContext,
)
from mongomem.sdk.transport import MemoryTransport
from mongomem.settings import Settings

if TYPE_CHECKING:
    from mongomem.adapters.tls import Verify

__all__ = ["BoundMemory", "LoopThread", "Memory", "SyncClient"]

T = TypeVar("T")
P = ParamSpec("P")

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


def _blocking(
    method: Callable[Concatenate[AsyncBoundMemory, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[BoundMemory, P], T]:
    """The blocking form of an :class:`AsyncBoundMemory` method: the same parameters
    and docstring, the call run on the memory's loop and bounded by its ``timeout_s``."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: BoundMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        coro: Coroutine[Any, Any, T] = getattr(self._inner, name)(*args, **kwargs)
        return self._m._call(coro)

    call.__qualname__ = f"BoundMemory.{name}"
    call.__module__ = __name__  # documented here, as BoundMemory's own
    return call


class BoundMemory:
    """The synchronous twin of :class:`~mongomem.sdk.AsyncBoundMemory`.

    It has every method of :class:`~mongomem.sdk.AsyncBoundMemory`, with the
    same parameters, results and docstrings, blocking: each runs the async call
    on the memory's loop, bounded by the memory's ``timeout_s``. Only
    :meth:`wait_until_processed` differs (its own ``timeout`` bounds it).
    """

    def __init__(self, memory: Memory, inner: AsyncBoundMemory) -> None:
        self._m = memory
        self._inner = inner
        self.identity = inner.identity

    save_semantic = _blocking(AsyncBoundMemory.save_semantic)
    get_semantic = _blocking(AsyncBoundMemory.get_semantic)
    search_semantic = _blocking(AsyncBoundMemory.search_semantic)
    save_episode = _blocking(AsyncBoundMemory.save_episode)
    search_episodes = _blocking(AsyncBoundMemory.search_episodes)
    list_episodes = _blocking(AsyncBoundMemory.list_episodes)
    save_procedure = _blocking(AsyncBoundMemory.save_procedure)
    discover_procedures = _blocking(AsyncBoundMemory.discover_procedures)
    get_procedure = _blocking(AsyncBoundMemory.get_procedure)
    save_taxonomic = _blocking(AsyncBoundMemory.save_taxonomic)
    get_taxonomic_term = _blocking(AsyncBoundMemory.get_taxonomic_term)
    search_taxonomic = _blocking(AsyncBoundMemory.search_taxonomic)
    list_domains = _blocking(AsyncBoundMemory.list_domains)
    build_context = _blocking(AsyncBoundMemory.build_context)
    search_turns = _blocking(AsyncBoundMemory.search_turns)
    history = _blocking(AsyncBoundMemory.history)
    value_as_of = _blocking(AsyncBoundMemory.value_as_of)
    delete_memory = _blocking(AsyncBoundMemory.delete_memory)
    delete_by_key = _blocking(AsyncBoundMemory.delete_by_key)
    delete_semantic = _blocking(AsyncBoundMemory.delete_semantic)
    delete_episode = _blocking(AsyncBoundMemory.delete_episode)
    delete_procedure = _blocking(AsyncBoundMemory.delete_procedure)
    delete_taxonomic_term = _blocking(AsyncBoundMemory.delete_taxonomic_term)
    save_custom = _blocking(AsyncBoundMemory.save_custom)
    get_custom = _blocking(AsyncBoundMemory.get_custom)
    browse_memories = _blocking(AsyncBoundMemory.browse_memories)
    count_memories = _blocking(AsyncBoundMemory.count_memories)
    get_memory = _blocking(AsyncBoundMemory.get_memory)
    browse_sessions = _blocking(AsyncBoundMemory.browse_sessions)
    browse_turns = _blocking(AsyncBoundMemory.browse_turns)
    processing_status = _blocking(AsyncBoundMemory.processing_status)
    record_turn = _blocking(AsyncBoundMemory.record_turn)
    recent_turns = _blocking(AsyncBoundMemory.recent_turns)
    end_session = _blocking(AsyncBoundMemory.end_session)
    list_sessions = _blocking(AsyncBoundMemory.list_sessions)

    def wait_until_processed(
        self, timeout: float = 60.0, *, all_turns: bool = False, poll_s: float = 0.25
    ) -> ProcessingStatus:
        """As :meth:`AsyncBoundMemory.wait_until_processed`; ``timeout`` also bounds the call
        (the memory's ``timeout_s`` does not cut a longer wait short)."""
        return self._m._runner.call(
            self._inner.wait_until_processed(timeout, all_turns=all_turns, poll_s=poll_s),
            timeout + 30.0,
        )
