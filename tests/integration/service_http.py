"""The memory service on a free loopback port, for the HTTP tests (uvicorn, in process)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.sdk.wire import ROUTES
from mongomem.service.app import make_app
from mongomem.service.http import RunningServer, start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings

#: The stand-in embedder of the service under test (hashing, **not a model**).
EMBEDDER = HashingEmbedder(64)


def serving(settings: Settings, **service: Any) -> Settings:
    """``settings`` with ``service`` changes, the stand-in embedder and the stand-in LLM."""
    return settings.model_copy(
        update={
            "service": settings.service.model_copy(update=service),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
        }
    )


async def start(settings: Settings) -> tuple[RunningServer, str]:
    """Serve ``settings`` on 127.0.0.1 at a free port; the server (to stop) and base URL."""
    running = await start_server(make_app(settings, embedder=EMBEDDER))
    return running, running.url


async def call(base: str, operation: str, body: dict[str, Any], key: str | None) -> httpx.Response:
    """One operation as a raw request: ``body`` holds the caller and the arguments, flat."""
    route = ROUTES[operation]
    path = route.path.format(**{n: quote(str(body[n]), safe="") for n in route.path_fields})
    rest = {k: v for k, v in body.items() if k not in route.path_fields and k != "user_id"}
    query: dict[str, Any] = {k: rest.pop(k) for k in ("project_id", "session_id") if k in rest}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=base, headers=headers) as client:
        if route.method != "POST":
            return await client.request(route.method, path, params=query | rest)
        return await client.post(path, params=query, json=rest)
