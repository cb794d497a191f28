"""Test doubles that ship with mongomem (no network, no model).

* :class:`FakeOpenAIServer` — a local OpenAI-compatible HTTP server (chat
  completions and embeddings) with scripted answers and injected faults
  (:mod:`mongomem.testing.replies`); the real ``openai`` client talks to it.
* :class:`StandInResponder` — the rule-based demo responder used by
  ``make run`` when no LLM is configured. It is NOT a model and says so.
* :func:`make_certificates` — a throw-away CA and a loopback server
  certificate, for tests of the servers' TLS.

Run as a process: ``python -m mongomem.testing [--stand-in] [--port N]``.
"""

from mongomem.testing.certs import Certificates, make_certificates
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
    conversation_of,
)
from mongomem.testing.server import FakeOpenAIServer
from mongomem.testing.snapshots import make_snapshot
from mongomem.testing.stand_in import STAND_IN_BANNER, STAND_IN_MODEL, StandInResponder

__all__ = [
    "STAND_IN_BANNER",
    "STAND_IN_MODEL",
    "Answer",
    "Certificates",
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
    "make_certificates",
    "make_snapshot",
]
