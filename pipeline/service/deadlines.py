"""The service's per-request deadline, ended early when the client disconnects (issue 17).

:class:`RequestDeadlines` is ASGI middleware around the memory service. For
every HTTP request whose path is not ``exempt`` it makes a
:class:`~mongomem.deadlines.Deadline` of ``MONGOMEM_SERVICE_REQUEST_DEADLINE_S``
seconds (default 30; ``none``: only a disconnect ends it) the request's own,
then reads the request's body (bounded by the body limits outside it) and,
while the app works, listens for the client's ``http.disconnect``. When the
client goes away the deadline is abandoned at once. So, with
:mod:`mongomem.deadlines` and :mod:`mongomem.service.scheduling`: a request whose
client gave up, or whose time is up, has its queued embedding dropped, writes
nothing, and is answered 503 ``DeadlineExceeded`` (``Retry-After``) if anyone
is still listening.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from mongomem.deadlines import Deadline, within
from mongomem.extras import require

with require("service"):
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestDeadlines"]


class RequestDeadlines:
    """ASGI middleware: each request's deadline, abandoned when its client disconnects."""

    def __init__(
        self,
        app: ASGIApp,
        seconds: float | None,
        exempt: Callable[[str], bool] = lambda _path: False,
    ) -> None:
        self.app = app
        self.seconds = seconds
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        with within(Deadline(self.seconds)) as deadline:
            body: list[Message] = []
            while True:  # the whole body first (the body limits bound it), then listen
                message = await receive()
                body.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
            gone = asyncio.Event()
            if body[-1]["type"] == "http.disconnect":
                deadline.abandon()
                gone.set()

            async def listen() -> None:
                while not gone.is_set():
                    if (await receive())["type"] == "http.disconnect":
                        deadline.abandon()
                        gone.set()

            async def replay() -> Message:
                if body:
                    return body.pop(0)
                await gone.wait()
                return {"type": "http.disconnect"}

            listener = None if gone.is_set() else asyncio.create_task(listen())
            try:
                await self.app(scope, replay, send)
            finally:
                if listener is not None:
                    listener.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await listener
