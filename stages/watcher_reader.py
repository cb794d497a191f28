"""Reading a change stream ahead of the watcher's publisher (see :mod:`mongomem.stages.watcher`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.adapters.mongo import Document
from mongomem.errors import ChangeFeedError, ResumeTokenLost
from mongomem.models import utcnow
from mongomem.stages.watcher_logic import open_failure_verdict

__all__ = ["IDLE_PROBE_S", "IDLE_READ_S", "ChangeReader", "Idle", "LogProbe", "LogSize", "Stream"]

Stream = AsyncChangeStream[Document]
#: Reads ``(how far the server's change log is, how far the watched collection is)``
#: (``None``: unknown). Two equal answers mean nothing was written in between; a first
#: part that moved alone means only other collections were written (see
#: :class:`ChangeReader`, "Idle").
LogProbe = Callable[[], Awaitable[tuple[int, int] | None]]
#: Reads how far the server's change log is, alone (one command; ``None``: unknown): the
#: first part of a :data:`LogProbe`, what an idle reader asks first (see "Idle").
LogSize = Callable[[], Awaitable[int | None]]
#: How often an idle reader asks the :data:`LogProbe` (when it uses one).
IDLE_PROBE_S = 0.25
#: While only other collections are written, an idle reader still reads the stream this
#: often (the watched part of a probe is a hint, not proof: see "Idle").
IDLE_READ_S = 1.0


class Idle(NamedTuple):
    """An empty read: nothing more to read now; the stream's token at that point.

    ``read_at`` is the wall-clock time at which that read began: every change
    made before it had been read (the watcher's caught-up watermark).
    """

    token: Mapping[str, Any] | None
    read_at: datetime


class ChangeReader:
    """Reads a change stream ahead of the publisher, in a task of its own.

    pymongo asks the server for the next batch (getMore) only when the
    current one is used up; reading in a separate task keeps that request in
    flight, and the server busy, while the publisher encodes and sends the
    changes already read. At most ``limit`` changes wait. An empty read is
    queued as :class:`Idle`; after two in a row the reader pauses ``poll_s``.
    A failure of the stream is raised by :meth:`take` once the changes read
    before it have been taken.

    Idle. MongoDB holds an empty getMore up to the stream's ``max_await_time_ms``
    and answers as soon as a change comes, so reading on costs nothing while
    nothing happens. mongo-java-server answers such a getMore at once, and
    each getMore scans its whole oplog: asked every ``poll_s``, an idle
    watcher kept it busy (issue 28). Given ``probe`` (a :data:`LogProbe`: the
    source gives one only for an oplog that only grows, so an unchanged answer
    means nothing was written), the reader, after two empty reads, asks
    ``probe`` every :data:`IDLE_PROBE_S` instead and reads the stream again only
    once the answer differs from the one taken just before the last empty
    read. Each unchanged answer stands for an empty read that began when the
    probe was sent (nothing was written since a read that found nothing), so
    it is queued as :class:`Idle` like one (replacing an :class:`Idle` not
    taken yet): the caught-up watermark moves on as before. When only the log
    part moved (other collections were written: an import, an erasure, the
    stages' own writes), the stream is read again only after
    :data:`IDLE_READ_S` and nothing stands for a read meanwhile (the watched
    collection's size is a hint: a delete and an insert between two probes
    leave it equal). A probe that fails or answers ``None`` ends probing for
    this reader.

    Given ``log_size`` as well (the log part of ``probe`` alone, one command
    instead of two), each idle probe asks it first and asks ``probe`` only once
    the log moved: an unchanged log means nothing at all was written since the
    answer taken before the last empty read, so it stands for an empty read by
    itself (issue 28: half the commands an idle watcher sends).
    """

    def __init__(
        self,
        stream: Stream,
        wake: asyncio.Event,
        *,
        limit: int,
        poll_s: float,
        probe: LogProbe | None = None,
        log_size: LogSize | None = None,
    ) -> None:
        self._stream = stream
        self._wake = wake
        self._limit = limit
        self._poll_s = poll_s
        self._probe = probe
        self._log_size = log_size if probe is not None else None
        #: Empty reads of the stream, and probes that stood in for one.
        self.empty_reads = self.probes = 0
        self._queue: deque[Mapping[str, Any] | Idle] = deque()
        self._room = asyncio.Event()
        self._error: Exception | None = None
        self._task = asyncio.create_task(self._read())

    def take(self, most: int) -> list[Mapping[str, Any] | Idle]:
        """Up to ``most`` changes in stream order (none yet: empty); raises a stream failure."""
        queue = self._queue
        if len(queue) <= most:
            changes = list(queue)
            queue.clear()
        else:
            changes = [queue.popleft() for _ in range(most)]
        self._room.set()
        if not changes and self._error is not None:
            raise self._error
        return changes

    @property
    def waiting(self) -> int:
        """Changes read and not taken yet."""
        return len(self._queue)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self) -> None:
        idle = False
        try:
            while True:
                mark = await self._ask() if idle and self._probe is not None else None
                read_at = utcnow()
                change = await self._next()
                if change is None:
                    self.empty_reads += 1
                    self._idle(Idle(self._stream.resume_token, read_at))
                    if idle:  # twice in a row: nothing is coming, do not spin
                        if mark is not None:
                            await self._until_written(mark)
                        else:
                            await asyncio.sleep(self._poll_s)
                    idle = True
                    continue
                idle = False
                self._queue.append(change)
                self._wake.set()
                if len(self._queue) >= self._limit:
                    self._room.clear()
                    await self._room.wait()
        except Exception as exc:  # handed to the publisher, which raises it
            self._error = exc
            self._wake.set()

    def _idle(self, idle: Idle) -> None:
        queue = self._queue
        if queue and isinstance(queue[-1], Idle):
            queue[-1] = idle  # the later one says more; the earlier was not taken yet
        else:
            queue.append(idle)
        self._wake.set()

    async def _ask(self) -> tuple[int, int] | None:
        """The probe's answer; ``None`` (and probing ends) when it has none or fails."""
        probe = self._probe
        answer: tuple[int, int] | None = None
        if probe is not None:
            with contextlib.suppress(PyMongoError):
                answer = await probe()
        if answer is None:
            self._probe = self._log_size = None
        return answer

    async def _ask_size(self) -> int | None:
        """``log_size``'s answer; ``None`` (and probing ends) when it has none or fails."""
        size = self._log_size
        answer: int | None = None
        if size is not None:
            with contextlib.suppress(PyMongoError):
                answer = await size()
        if answer is None:
            self._probe = self._log_size = None
        return answer

    async def _until_written(self, mark: tuple[int, int]) -> None:
        """Wait until the watched collection may have changed since ``mark`` was taken
        (before the last empty read), or :data:`IDLE_READ_S` passed while only other
        collections were written (see "Idle")."""
        read = time.monotonic()
        moved = False  # the log moved since the mark: ``log_size`` alone says no more
        while True:
            await asyncio.sleep(IDLE_PROBE_S)
            read_at = utcnow()
            if self._log_size is not None and not moved:
                size = await self._ask_size()
                if size is None:
                    return
                if size == mark[0]:  # nothing written since the mark: an empty read
                    self.probes += 1
                    self._idle(Idle(self._stream.resume_token, read_at))
                    continue
                moved = True
            answer = await self._ask()
            if answer is None or answer[1] != mark[1]:
                return
            if answer == mark:
                self.probes += 1
                self._idle(Idle(self._stream.resume_token, read_at))
            elif time.monotonic() - read >= IDLE_READ_S:
                return

    async def _next(self) -> Document | None:
        try:
            return await self._stream.try_next()
        except OperationFailure as exc:
            if open_failure_verdict(exc.code, with_token=False) == "lost":
                raise ResumeTokenLost(f"server code {exc.code}: {exc}") from exc
            raise ChangeFeedError(f"the change stream failed: {exc}") from exc
        except PyMongoError as exc:
            raise ChangeFeedError(f"the change stream failed: {exc}") from exc
