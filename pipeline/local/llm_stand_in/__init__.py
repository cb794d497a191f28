"""The LLM stand-in: what ``mongomem up`` answers extraction with when no LLM is configured.

It is NOT a model and says so everywhere: every answer's ``model`` field is
:data:`STAND_IN_MODEL`, the start prints :data:`STAND_IN_BANNER`, embeddings
are labelled hashing vectors. It is used only when no endpoint is set and
``MONGOMEM_LLM_USE_STAND_IN`` is on (:func:`mongomem.adapters.llm.make_llm` decides).

* :class:`StandInResponder` — the rules (:mod:`mongomem.local.llm_stand_in.rules`).
* :class:`OpenAICompatibleServer` — a local OpenAI-compatible HTTP server for
  any responder (:mod:`mongomem.local.llm_stand_in.server`), on asyncio and h11
  (:mod:`mongomem.local.llm_stand_in.http`), so it needs nothing beyond the core.
* :func:`stand_in_server` — the two together.

Run as a process (what ``mongomem up`` starts):
``python -m mongomem.local.llm_stand_in [--host H] [--port N]``.

The test double :class:`mongomem.testing.FakeOpenAIServer` builds on this
server; nothing here imports :mod:`mongomem.testing`.
"""

from __future__ import annotations

import ssl

from mongomem.local.llm_stand_in.chat import Answer, ChatRequest, Responder
from mongomem.local.llm_stand_in.rules import STAND_IN_BANNER, STAND_IN_MODEL, StandInResponder
from mongomem.local.llm_stand_in.server import OpenAICompatibleServer

__all__ = [
    "STAND_IN_BANNER",
    "STAND_IN_MODEL",
    "Answer",
    "ChatRequest",
    "OpenAICompatibleServer",
    "Responder",
    "StandInResponder",
    "stand_in_server",
]


def stand_in_server(
    *, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
) -> OpenAICompatibleServer:
    """The rule-based stand-in (NOT a model) behind a local OpenAI-compatible server."""
    return OpenAICompatibleServer(
        StandInResponder(), model=STAND_IN_MODEL, host=host, port=port, ssl_context=ssl_context
    )
