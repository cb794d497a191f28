"""Per-request deadlines: work a caller gave up on is dropped, and nothing is written late.

A :class:`Deadline` ends at a time on the event loop's clock, or earlier when
whoever made it calls :meth:`Deadline.abandon` (the memory service does when
the client closes its connection, :mod:`mongomem.service.http`). :func:`within`
makes it the deadline of the current task (a context variable, so the tasks a
request starts inherit it). What it guarantees:

* **Queued work is dropped.** A future registered with :meth:`Deadline.watch`
  (a queued embedding job, :mod:`mongomem.service.scheduling`) fails with
  :class:`~mongomem.errors.DeadlineExceeded` the moment the deadline ends;
  the queue then skips the job, so it is never embedded.
* **Nothing is written after it.** Every writer of a request calls
  :func:`check_deadline` right before its first write (a direct save, a turn);
  past the deadline it raises :class:`~mongomem.errors.DeadlineExceeded` and
  nothing is stored. A write that has begun is not interrupted (no half
  writes): the check is the last point where a request can be refused.

Without a current deadline (the in-process SDK, the pipeline's stages) every
check passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from mongomem.errors import DeadlineExceeded

__all__ = ["Deadline", "check_deadline", "current_deadline", "within"]

#: Why a deadline ended, as the error says it.
TIMED_OUT = "the request's deadline passed before it was done; nothing was stored"
ABANDONED = "the client closed the connection before the answer; nothing was stored"

_CURRENT: ContextVar[Deadline | None] = ContextVar("mongomem_deadline", default=None)


class Deadline:
    """Ends ``seconds`` from now (``None``: never by itself), or at :meth:`abandon`.

    Made inside a running event loop; :meth:`close` stops its timer once the
    request is answered.
    """

    def __init__(self, seconds: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        self.expires_at = None if seconds is None else self._loop.time() + seconds
        self._reason: str | None = None
        self._watched: set[asyncio.Future[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        if self.expires_at is not None:
            self._timer = self._loop.call_at(self.expires_at, self._end, TIMED_OUT)

    @property
    def ended(self) -> str | None:
        """Why it ended (its error's message), or ``None`` while it runs."""
        expires = self.expires_at
        if self._reason is None and expires is not None and self._loop.time() >= expires:
            self._end(TIMED_OUT)
        return self._reason

    def abandon(self, reason: str = ABANDONED) -> None:
        """End it now: the caller is gone."""
        self._end(reason)

    def _end(self, reason: str) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        if self._timer is not None:
            self._timer.cancel()
        for future in list(self._watched):
            if not future.done():
                future.set_exception(DeadlineExceeded(reason))
        self._watched.clear()

    def check(self) -> None:
        """Raise :class:`~mongomem.errors.DeadlineExceeded` once it has ended."""
        reason = self.ended
        if reason is not None:
            raise DeadlineExceeded(reason)

    def watch(self, future: asyncio.Future[Any]) -> None:
        """Fail ``future`` with :class:`~mongomem.errors.DeadlineExceeded` when this ends."""
        self.check()
        self._watched.add(future)
        future.add_done_callback(self._watched.discard)

    def close(self) -> None:
        """Stop the timer (the request is answered); an ended deadline stays ended."""
        if self._timer is not None:
            self._timer.cancel()


def current_deadline() -> Deadline | None:
    """The current task's deadline, if it has one."""
    return _CURRENT.get()


def check_deadline() -> None:
    """Raise :class:`~mongomem.errors.DeadlineExceeded` if the current deadline has ended."""
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.check()


@contextmanager
def within(deadline: Deadline) -> Iterator[Deadline]:
    """Make ``deadline`` the current task's for the block (and close it after)."""
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)
        deadline.close()
