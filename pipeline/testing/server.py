"""The fake OpenAI-compatible server: scripted answers, injected faults, dialects, recording.

It is the product's local server
(:class:`~mongomem.local.llm_stand_in.server.OpenAICompatibleServer`, the one the
LLM stand-in runs on) with what tests need on top. The real ``openai`` client
talks to it over HTTP, so tests exercise the same code path as production.
Answers come from, in order: the scripted queue (:meth:`FakeOpenAIServer.script`),
the responder function, or an empty extraction ``{"items": []}``. Faults are
replies (:mod:`mongomem.testing.replies`): a delay, a 429 with
``Retry-After``, a 5xx, JSON that is malformed or misses the schema, a
connection dropped mid-body. Embeddings are feature-hashing vectors (NOT a
model).

With a :class:`~mongomem.testing.dialects.Dialect` the server accepts only
that dialect's structured-output modes and refuses the rest as the real
server it is named after does. Every chat request is recorded
(:attr:`chat_requests`, :attr:`refused_requests`), every embedding request too
(:attr:`embedding_requests`).

In-process (tests)::

    with FakeOpenAIServer() as server:
        server.script(RateLimited(retry_after=0.1), Answer({"items": []}))
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key="test"))

As a process: ``python -m mongomem.testing --port 8089``. It binds to
loopback only; give it an ``ssl_context`` to serve TLS.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections import deque
from collections.abc import Callable

from mongomem.local.llm_stand_in.http import Response, openai_error
from mongomem.local.llm_stand_in.server import OpenAICompatibleServer
from mongomem.testing.dialects import Dialect
from mongomem.testing.replies import (
    Answer,
    ChatRequest,
    Dropped,
    Malformed,
    RateLimited,
    Reply,
    Responder,
    SchemaViolation,
    ServerError,
    Slow,
)

__all__ = ["FakeOpenAIServer"]

EmbeddingPredicate = Callable[[list[str]], bool]


class FakeOpenAIServer(OpenAICompatibleServer):
    """Scripted OpenAI-compatible server on a loopback port (thread or process)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        dialect: Dialect | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(None, model=model, host=host, port=port, ssl_context=ssl_context)
        self.responder = responder
        self.dialect = dialect
        self._lock = threading.Lock()
        self._queue: deque[tuple[str | None, Reply]] = deque()
        self._holds: list[tuple[EmbeddingPredicate, threading.Event]] = []
        self._stopping = threading.Event()
        self.chat_requests: list[ChatRequest] = []
        self.refused_requests: list[ChatRequest] = []
        self.embedding_requests: list[list[str]] = []

    # -- scripting --------------------------------------------------------

    def script(self, *replies: Reply, schema_name: str | None = None) -> None:
        """Queue replies, used first-come; ``schema_name`` limits them to one schema."""
        with self._lock:
            self._queue.extend((schema_name, r) for r in replies)

    def hold_embeddings(self, predicate: EmbeddingPredicate) -> threading.Event:
        """Hold embedding requests matching ``predicate`` until the returned event is set."""
        gate = threading.Event()
        with self._lock:
            self._holds.append((predicate, gate))
        return gate

    def requests_for(self, schema_name: str) -> list[ChatRequest]:
        with self._lock:
            return [r for r in self.chat_requests if r.schema_name == schema_name]

    def _next_reply(self, request: ChatRequest) -> Reply:
        with self._lock:
            self.chat_requests.append(request)
            for i, (name, reply) in enumerate(self._queue):
                if name is None or name == request.schema_name:
                    del self._queue[i]
                    return reply
        if self.responder is not None:
            return self.responder(request)
        return Answer({"items": []})

    # -- answering --------------------------------------------------------

    async def respond(self, chat: ChatRequest) -> Response:
        if self.dialect is not None and chat.mode not in self.dialect.accepts:
            refusal = self.dialect.refusal(chat.mode)
            with self._lock:
                self.chat_requests.append(chat)
                self.refused_requests.append(chat)
            return Response(refusal.status, json.dumps(dict(refusal.body)).encode())
        return await self._render_reply(chat, self._next_reply(chat))

    async def _render_reply(self, chat: ChatRequest, reply: Reply) -> Response:
        fenced = self.dialect is not None and self.dialect.fenced
        if isinstance(reply, Slow):
            await asyncio.sleep(reply.seconds)
            return await self._render_reply(chat, reply.then)
        if isinstance(reply, RateLimited):
            headers = {}
            if reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            return openai_error(429, "injected rate limit", "rate_limit_exceeded", headers)
        if isinstance(reply, ServerError):
            return openai_error(reply.status, reply.message, "server_error")
        if isinstance(reply, Dropped):
            whole = self.completion(chat, reply.then, fenced=fenced)
            return Response(whole.status, whole.body, whole.headers, cut_after=reply.after_bytes)
        if isinstance(reply, Malformed):
            return self.render(chat, reply.content, fenced=fenced)
        if isinstance(reply, SchemaViolation):
            return self.render(chat, json.dumps(reply.content), fenced=fenced)
        return self.completion(chat, reply, fenced=fenced)

    async def admit_embedding(self, texts: list[str]) -> None:
        with self._lock:
            self.embedding_requests.append(list(texts))
            gates = [gate for pred, gate in self._holds if pred(texts)]
        for gate in gates:
            await asyncio.to_thread(self._wait, gate)

    def _wait(self, gate: threading.Event) -> None:
        while not gate.wait(0.05) and not self._stopping.is_set():
            pass

    def stop(self) -> None:
        self._stopping.set()
        super().stop()
