"""A local OpenAI-compatible HTTP server: chat completions, embeddings, the model list.

The real ``openai`` client talks to it over HTTP, so whatever uses it runs the
production code path. A :data:`~mongomem.local.llm_stand_in.chat.Responder` answers
each chat request; the answer is shaped by the request's structured-output
mode: a forced tool call gets it as the call's arguments, every other mode as
the message content. Embeddings are feature-hashing vectors
(:class:`~mongomem.adapters.embeddings.HashingEmbedder`) and say so in their ``model``
field: NOT a model.

It keeps nothing per request (a long-running stand-in does not grow); the
test double :class:`mongomem.testing.FakeOpenAIServer` builds on it and adds
recording, scripted faults and dialects through :meth:`respond` and
:meth:`admit_embedding`.

In a thread (returns once the port is bound)::

    with OpenAICompatibleServer(responder, model="...") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="any")

In the current event loop: ``await server.serve_forever()``. It binds to
loopback unless told otherwise, and serves TLS when given an ``ssl_context``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
import sys
import threading
import time
from types import TracebackType
from typing import Any, Self

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.local.llm_stand_in.chat import Answer, ChatRequest, Responder
from mongomem.local.llm_stand_in.http import (
    HttpServer,
    Request,
    Response,
    json_response,
    openai_error,
)

__all__ = ["OpenAICompatibleServer"]

#: The embedding size when a request names none (multilingual-e5-small's).
_DIMENSIONS = 384


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class OpenAICompatibleServer:
    """``responder`` behind ``/v1/chat/completions``, ``/v1/embeddings`` and ``/v1/models``."""

    def __init__(
        self,
        responder: Responder | None,
        *,
        model: str,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._responder = responder
        self.model = model
        self._host = host
        self._http = HttpServer(self._route, host=host, port=port, ssl_context=ssl_context)
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what a subclass may change -----------------------------------------

    async def respond(self, chat: ChatRequest) -> Response:
        """The response to one chat request: the responder's answer, rendered for its mode.

        Without a responder the answer is an empty extraction, ``{"items": []}``.
        """
        answer = self._responder(chat) if self._responder is not None else Answer({"items": []})
        return self.completion(chat, answer)

    async def admit_embedding(self, texts: list[str]) -> None:
        """Called before an embedding request is answered (a subclass may wait here)."""

    def completion(self, chat: ChatRequest, answer: Answer, *, fenced: bool = False) -> Response:
        """``answer`` as a chat completion for ``chat``'s mode (``fenced``: in a code fence
        when no format is enforced, as chatty models answer)."""
        raw = answer.content
        content = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        return self.render(
            chat, content, finish=answer.finish_reason, model=answer.model, fenced=fenced
        )

    def render(
        self,
        chat: ChatRequest,
        content: str,
        *,
        finish: str = "stop",
        model: str | None = None,
        fenced: bool = False,
    ) -> Response:
        """``content`` (any text, JSON or not) as the chat completion for ``chat``."""
        prompt = _tokens(chat.text())
        completion = _tokens(content)
        message: dict[str, object] = {"role": "assistant", "content": content, "refusal": None}
        if chat.mode == "tools":
            # A forced tool call: the answer is the call's arguments.
            call = {"name": chat.schema_name or "answer", "arguments": content}
            message["content"] = None
            message["tool_calls"] = [{"id": f"call-{prompt}", "type": "function", "function": call}]
            finish = "tool_calls" if finish == "stop" else finish
        elif chat.mode == "prompt" and fenced:
            message["content"] = f"```json\n{content}\n```"
        return json_response(
            {
                "id": f"chatcmpl-local-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model or self.model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    # -- HTTP -----------------------------------------------------------------

    async def _route(self, request: Request) -> Response:
        routes = {
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/embeddings": ("POST", self._embeddings),
            "/v1/models": ("GET", self._models),
        }
        route = routes.get(request.path.rstrip("/"))
        if route is None:
            return openai_error(404, f"no route {request.path}", "invalid_request_error")
        method, handler = route
        if request.method != method:
            return openai_error(
                405, f"{request.path} takes {method}", "invalid_request_error", {"allow": method}
            )
        return await handler(request)

    async def _models(self, request: Request) -> Response:
        entry = {"id": self.model, "object": "model", "owned_by": "local"}
        return json_response({"object": "list", "data": [entry]})

    async def _chat(self, request: Request) -> Response:
        body = _json_object(request)
        if body is None:
            return openai_error(400, "request body must be a JSON object", "invalid_request_error")
        return await self.respond(ChatRequest(body=body, headers=request.headers))

    async def _embeddings(self, request: Request) -> Response:
        body = _json_object(request)
        raw = body.get("input") if body is not None else None
        texts = [raw] if isinstance(raw, str) else raw
        if (
            body is None
            or not isinstance(texts, list)
            or not all(isinstance(t, str) for t in texts)
        ):
            return openai_error(
                400, "input must be a string or a list of strings", "invalid_request_error"
            )
        await self.admit_embedding(texts)
        dimensions = body.get("dimensions") or _DIMENSIONS
        if not isinstance(dimensions, int) or dimensions < 1:
            return openai_error(
                400, "dimensions must be a positive integer", "invalid_request_error"
            )
        vectors = await HashingEmbedder(dimensions).embed(texts)
        return json_response(
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

    # -- lifecycle ------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def base_url(self) -> str:
        return f"{self._http.scheme}://{self._host}:{self._http.port}/v1"

    def start(self) -> Self:
        """Serve from a daemon thread; returns once the port is bound."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._http.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            # Requests still in flight (a slow reply, a held embedding) end here,
            # not as "Task was destroyed but it is pending" at interpreter exit.
            loop.run_until_complete(self._http.close())
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="openai-compatible", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop the thread :meth:`start` began (requests in flight are cancelled)."""
        if self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> Self:
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
        await self._http.start()
        print(f"OpenAI-compatible server on {self.base_url}", file=sys.stderr, flush=True)
        if banner:
            print(banner, file=sys.stderr, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await self._http.close()


def _json_object(request: Request) -> dict[str, Any] | None:
    try:
        body = request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
