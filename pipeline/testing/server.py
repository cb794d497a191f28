"""A local OpenAI-compatible HTTP server: chat completions and embeddings.

The real ``openai`` client talks to it over HTTP, so tests exercise the same
code path as production. Answers come from, in order: the scripted queue
(:meth:`FakeOpenAIServer.script`), the responder function, or an empty
extraction ``{"items": []}``. Embeddings are feature-hashing vectors
(:class:`~mongomem.embeddings.HashingEmbedder`, NOT a model).

The answer is shaped by the request's structured-output mode: a forced tool
call gets it as the call's arguments, every other mode as the message
content. With a :class:`~mongomem.testing.dialects.Dialect` the server
accepts only that dialect's modes and refuses the rest as the real server
it is named after does.

In-process (tests)::

    with FakeOpenAIServer() as server:
        server.script(RateLimited(retry_after=0.1), Answer({"items": []}))
        llm = OpenAILLM(LLMSettings(base_url=server.base_url, api_key="test"))

As a process: ``python -m mongomem.testing --port 8089`` (add ``--stand-in``
for the rule-based demo responder, which is NOT a model either).
It binds to loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType

from mongomem.embeddings import HashingEmbedder
from mongomem.extras import require
from mongomem.testing.dialects import Dialect
from mongomem.testing.replies import (
    Answer,
    ChatRequest,
    Malformed,
    RateLimited,
    Reply,
    Responder,
    SchemaViolation,
    ServerError,
    Slow,
)

with require("testing"):
    from aiohttp import web

__all__ = ["FakeOpenAIServer"]

EmbeddingPredicate = Callable[[list[str]], bool]


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _error(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


class FakeOpenAIServer:
    """Scripted OpenAI-compatible server on a loopback port (thread or process)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        dialect: Dialect | None = None,
    ) -> None:
        self.responder = responder
        self.model = model
        self.dialect = dialect
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._queue: deque[tuple[str | None, Reply]] = deque()
        self._holds: list[tuple[EmbeddingPredicate, threading.Event]] = []
        self.chat_requests: list[ChatRequest] = []
        self.refused_requests: list[ChatRequest] = []
        self.embedding_requests: list[list[str]] = []
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = threading.Event()

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

    # -- HTTP -------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "local"}]}
        )

    async def _chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "request body must be an object", "invalid_request_error")
        chat = ChatRequest(body=body)
        if self.dialect is not None and chat.mode not in self.dialect.accepts:
            refusal = self.dialect.refusal(chat.mode)
            with self._lock:
                self.chat_requests.append(chat)
                self.refused_requests.append(chat)
            return web.json_response(dict(refusal.body), status=refusal.status)
        reply = self._next_reply(chat)
        return await self._render(chat, reply)

    async def _render(self, chat: ChatRequest, reply: Reply) -> web.Response:
        if isinstance(reply, Slow):
            await asyncio.sleep(reply.seconds)
            return await self._render(chat, reply.then)
        if isinstance(reply, RateLimited):
            headers = {}
            if reply.retry_after is not None:
                headers["Retry-After"] = f"{reply.retry_after:g}"
            return _error(429, "injected rate limit", "rate_limit_exceeded", headers)
        if isinstance(reply, ServerError):
            return _error(reply.status, reply.message, "server_error")
        model = self.model
        finish = "stop"
        if isinstance(reply, Malformed):
            content = reply.content
        elif isinstance(reply, SchemaViolation):
            content = json.dumps(reply.content)
        else:
            raw = reply.content
            content = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
            finish = reply.finish_reason
            model = reply.model or model
        prompt = _tokens(chat.text())
        completion = _tokens(content)
        message: dict[str, object] = {"role": "assistant", "content": content, "refusal": None}
        if chat.mode == "tools":
            # A forced tool call: the answer is the call's arguments.
            call = {"name": chat.schema_name or "answer", "arguments": content}
            message["content"] = None
            message["tool_calls"] = [{"id": f"call-{prompt}", "type": "function", "function": call}]
            finish = "tool_calls" if finish == "stop" else finish
        elif chat.mode == "prompt" and self.dialect is not None and self.dialect.fenced:
            message["content"] = f"```json\n{content}\n```"
        return web.json_response(
            {
                "id": f"chatcmpl-local-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    async def _embeddings(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error(400, "request body is not JSON", "invalid_request_error")
        raw = body.get("input") if isinstance(body, dict) else None
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error(400, "input must be a string or a list of strings", "invalid_request")
        with self._lock:
            self.embedding_requests.append(list(texts))
            gates = [gate for pred, gate in self._holds if pred(texts)]
        for gate in gates:
            await asyncio.to_thread(self._wait, gate)
        dimensions = body.get("dimensions") or 384
        embedder = HashingEmbedder(int(dimensions))
        vectors = await embedder.embed(texts)
        return web.json_response(
            {
                "object": "list",
                "model": f"{body.get('model', 'embedding')} (hashing vectors, NOT a model)",
                "data": [
                    {"object": "embedding", "index": i, "embedding": v}
                    for i, v in enumerate(vectors)
                ],
                "usage": {"prompt_tokens": sum(map(_tokens, texts)), "total_tokens": 0},
            }
        )

    def _wait(self, gate: threading.Event) -> None:
        while not gate.wait(0.05) and not self._stopping.is_set():
            pass

    # -- lifecycle --------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}/v1"

    async def _start_site(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self._port = sock.getsockname()[1]
        try:
            self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            sock.close()
            raise

    def start(self) -> FakeOpenAIServer:
        """Serve from a daemon thread; returns once the port is bound."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            # Requests still in flight (a Slow reply, a held embedding) end here,
            # not as "Task was destroyed but it is pending" at interpreter exit.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-openai", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def serve_forever(self, *, banner: str | None = None) -> None:
        """Serve in the current event loop until cancelled (the process mode)."""
        await self._start_site()
        print(f"OpenAI-compatible server on {self.base_url}", file=sys.stderr, flush=True)
        if banner:
            print(banner, file=sys.stderr, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
