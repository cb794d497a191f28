"""Reading a streamed request body (an import) within an idle and a total timeout.

An import's body is read as it arrives (chunked NDJSON, or a large body with a
``Content-Length``), with no request deadline around it: it may rightly take
long. :func:`timed_chunks` bounds it instead. A body that sends nothing for
``MONGOMEM_SERVICE_IMPORT_IDLE_TIMEOUT_S`` seconds, or that is still arriving
``MONGOMEM_SERVICE_IMPORT_TOTAL_TIMEOUT_S`` seconds after the request began, is
refused with :class:`~mongomem.errors.BodyTimeout` (HTTP 408); the import that
reads it rolls back, so nothing of it is stored and the connection is freed.
A client that hangs up raises Starlette's ``ClientDisconnect``, which
:class:`~mongomem.service.http.AnsweringRoute` answers as status 499.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mongomem.errors import BodyTimeout, InputError
from mongomem.extras import require
from mongomem.ltm.export_format import MAX_LINE_BYTES

with require("service"):
    from fastapi import Request

__all__ = ["body_lines", "timed_chunks"]


async def timed_chunks(request: Request, idle_s: float, total_s: float) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive; :class:`BodyTimeout` past either timeout."""
    loop = asyncio.get_running_loop()
    end = loop.time() + total_s
    chunks = aiter(request.stream())
    while True:
        left = end - loop.time()
        idle = idle_s <= left
        try:
            async with asyncio.timeout(max(0.0, min(idle_s, left))):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if idle:
                raise BodyTimeout(f"the body sent nothing for {idle_s:g} s") from None
            raise BodyTimeout(f"the body took longer than {total_s:g} s in all") from None
        yield chunk


async def body_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a body as they arrive (a line longer than the format allows is refused)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line
        if len(buffer) > MAX_LINE_BYTES:
            raise InputError(f"a line longer than {MAX_LINE_BYTES} bytes", field="body")
    if buffer:
        yield buffer
