"""The memory service on a free loopback port, for the HTTP tests (aiohttp, in process)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mongomem.embeddings import HashingEmbedder
from mongomem.service.app import make_app, runner_for
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


async def start(settings: Settings) -> tuple[web.AppRunner, str]:
    """Serve ``settings`` on 127.0.0.1 at a free port; the runner (to clean up) and base URL."""
    runner = runner_for(make_app(settings, embedder=EMBEDDER))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"
