"""A small HTTP/1.1 server on asyncio and h11: what the local OpenAI-compatible server runs on.

Not a web framework, on purpose: the LLM stand-in must run wherever the core
of mongomem runs (the SDK installs no web framework), and the fake server in
:mod:`mongomem.testing` must do what frameworks hide, such as dropping a
connection half-way through a body. Parsing is h11's (the HTTP/1.1 state
machine under httpx and uvicorn; the core has it through httpx), so this
module only moves bytes and events.

Guaranteed:

* persistent (keep-alive) connections, ``Content-Length`` and chunked request
  bodies, ``Expect: 100-continue``;
* a request h11 cannot parse is answered 400, a body over ``max_body`` (default
  :data:`MAX_BODY`) 413,
  and the connection is closed after either;
* a handler that raises is answered 500 (the error is logged, the server stays up);
* every response has a ``Content-Length``; :attr:`Response.cut_after` sends only
  that many body bytes and then drops the connection (a fault to inject);
* TLS when an :class:`ssl.SSLContext` is given;
* :meth:`HttpServer.close` cancels the requests still in flight and closes
  every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h11

__all__ = [
    "MAX_BODY",
    "Handler",
    "HttpServer",
    "Request",
    "Response",
    "json_response",
    "openai_error",
]

log = logging.getLogger(__name__)

#: The largest request body accepted (bytes); a larger one is answered 413.
MAX_BODY = 32 * 1024 * 1024

_READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class Request:
    """One request as received: ``path`` without the query, header names in lower case."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (raises :class:`ValueError` when it is not JSON)."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Response:
    """A response; with ``cut_after`` only that many body bytes are sent, then the
    connection is dropped (the headers still announce the whole body)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"
    cut_after: int | None = None


def json_response(
    data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``data`` as a JSON response."""
    body = json.dumps(data, ensure_ascii=False).encode()
    return Response(status, body, tuple((headers or {}).items()))


def openai_error(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> Response:
    """An error response in OpenAI's shape (the only errors this server's users send)."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return json_response(body, status, headers)


Handler = Callable[[Request], Awaitable[Response]]


class _TooLarge(Exception):
    pass


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0: a free one, known after :meth:`start`)."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        self._handler = handler
        self._max_body = max_body
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._port

    @property
    def scheme(self) -> str:
        return "https" if self._ssl is not None else "http"

    async def start(self) -> None:
        """Bind and listen; returns once connections are accepted."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            self._port = sock.getsockname()[1]
            self._server = await asyncio.start_server(self._connection, sock=sock, ssl=self._ssl)
        except BaseException:
            sock.close()
            raise

    async def close(self) -> None:
        """Stop accepting, cancel the requests in flight, close every connection."""
        if self._server is not None:
            self._server.close()
        pending = list(self._connections)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    # -- one connection -----------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._converse(h11.Connection(h11.SERVER), reader, writer)
        except (ConnectionError, ssl.SSLError, TimeoutError):
            pass  # the peer went away: nothing to answer
        except h11.LocalProtocolError:
            log.exception("a response h11 refuses to send (a handler bug); connection closed")
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _converse(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            try:
                request = await self._read_request(conn, reader, writer)
            except h11.RemoteProtocolError as exc:
                await self._refuse(conn, writer, exc.error_status_hint, f"bad request: {exc}")
                return
            except _TooLarge:
                await self._refuse(conn, writer, 413, f"request body over {self._max_body} bytes")
                return
            if request is None:
                return
            try:
                response = await self._handler(request)
            except Exception:
                log.exception("%s %s failed", request.method, request.path)
                response = openai_error(500, "internal error", "server_error")
            if not await self._send(conn, writer, response):
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # h11 says the connection must close (Connection: close, HTTP/1.0)
            conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Request | None:
        """The next whole request, or None when the peer closed the connection."""
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    writer.write(
                        conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
                    )
                conn.receive_data(await reader.read(_READ_SIZE))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self._max_body:
                    raise _TooLarge
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                target = head.target.decode("latin-1")
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers}
                return Request(
                    method=head.method.decode("ascii"),
                    path=target.partition("?")[0],
                    headers=headers,
                    body=b"".join(chunks),
                )
            else:  # ConnectionClosed, PAUSED
                return None

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response
    ) -> bool:
        """Write ``response``; False when the connection was dropped on purpose."""
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            *response.headers,
        ]
        head = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
        if response.cut_after is not None:
            writer.write(head + response.body[: response.cut_after])
            await writer.drain()
            writer.transport.abort()
            return False
        writer.write(head)
        writer.write(conn.send(h11.Data(data=response.body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return True

    async def _refuse(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, message: str
    ) -> None:
        """Answer a request that cannot be served (if h11 still allows an answer)."""
        response = openai_error(status, message, "invalid_request_error")
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            ("connection", "close"),
        ]
        with contextlib.suppress(h11.LocalProtocolError):
            writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            writer.write(response.body)
            await writer.drain()
