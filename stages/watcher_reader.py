"""Reading a change stream ahead of the watcher's publisher (see :mod:`mongomem.stages.watcher`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.errors import OperationFailure, PyMongoError

from mongomem.adapters.mongo import Document
from mongomem.errors import ChangeFeedError, ResumeTokenLost
from mongomem.models import utcnow
from mongomem.stages.watcher_logic import open_failure_verdict

__all__ = ["ChangeReader", "Idle", "Stream"]

Stream = AsyncChangeStream[Document]


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
    """

    def __init__(self, stream: Stream, wake: asyncio.Event, *, limit: int, poll_s: float) -> None:
        self._stream = stream
        self._wake = wake
        self._limit = limit
        self._poll_s = poll_s
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
                read_at = utcnow()
                change = await self._next()
                if change is None:
                    self._queue.append(Idle(self._stream.resume_token, read_at))
                    self._wake.set()
                    if idle:  # twice in a row: nothing is coming, do not spin
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

    async def _next(self) -> Document | None:
        try:
            return await self._stream.try_next()
        except OperationFailure as exc:
            if open_failure_verdict(exc.code, with_token=False) == "lost":
                raise ResumeTokenLost(f"server code {exc.code}: {exc}") from exc
            raise ChangeFeedError(f"the change stream failed: {exc}") from exc
        except PyMongoError as exc:
            raise ChangeFeedError(f"the change stream failed: {exc}") from exc
