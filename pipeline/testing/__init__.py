"""Test doubles that ship with mongomem (no network, no model).

* :class:`FakeOpenAIServer` — a local OpenAI-compatible HTTP server (chat
  completions and embeddings) with scripted answers and injected faults
  (:mod:`pipeline.testing.replies`); the real ``openai`` client talks to it.
* :class:`StandInResponder` — the rule-based demo responder used by
  ``make run`` when no LLM is configured. It is NOT a model and says so.

Run as a process: ``python -m pipeline.testing [--stand-in] [--port N]``.
"""

from pipeline.testing.replies import (
    Answer,
    ChatRequest,
    Malformed,
    RateLimited,
    Reply,
    Responder,
    SchemaViolation,
    ServerError,
    Slow,
    conversation_of,
)
from pipeline.testing.server import FakeOpenAIServer
from pipeline.testing.snapshots import make_snapshot
from pipeline.testing.stand_in import STAND_IN_BANNER, STAND_IN_MODEL, StandInResponder

__all__ = [
    "STAND_IN_BANNER",
    "STAND_IN_MODEL",
    "Answer",
    "ChatRequest",
    "FakeOpenAIServer",
    "Malformed",
    "RateLimited",
    "Reply",
    "Responder",
    "SchemaViolation",
    "ServerError",
    "Slow",
    "StandInResponder",
    "conversation_of",
    "make_snapshot",
]
