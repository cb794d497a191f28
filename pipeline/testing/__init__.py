"""Test doubles that ship with mongomem (no network, no model).

* :class:`FakeOpenAIServer` — the product's local OpenAI-compatible HTTP
  server (:class:`~mongomem.local.llm_stand_in.OpenAICompatibleServer`: chat
  completions and embeddings) with scripted answers, injected faults
  (:mod:`mongomem.testing.replies`) and every request recorded; the real
  ``openai`` client talks to it.
  A :class:`Dialect` makes it accept only the structured-output modes of one
  real server and refuse the others as that server does
  (:mod:`mongomem.testing.dialects`).
* :class:`StandInResponder` — the rule-based demo responder used by
  ``make run`` when no LLM is configured. It is NOT a model and says so. It
  is a product feature (:mod:`mongomem.local.llm_stand_in`), re-exported here.
* :func:`make_certificates` — a throw-away CA and a loopback server
  certificate, for tests of the servers' TLS.

Run as a process: ``python -m mongomem.testing [--stand-in] [--port N]``.

The product imports nothing from here (a test scans for it); this package
imports the product.
"""

from mongomem.local.llm_stand_in import STAND_IN_BANNER, STAND_IN_MODEL, StandInResponder
from mongomem.testing.certs import Certificates, make_certificates
from mongomem.testing.dialects import (
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER_BEFORE_JSON_SCHEMA,
    LM_STUDIO,
    PROMPT_ONLY,
    TOOLS_ONLY,
    VLLM_JSON_OBJECT_ONLY,
    Dialect,
    Refusal,
)
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
    citing,
    conversation_of,
    turn_seqs,
)
from mongomem.testing.server import FakeOpenAIServer
from mongomem.testing.snapshots import make_snapshot

__all__ = [
    "LLAMA_CPP_PYTHON",
    "LLAMA_SERVER_BEFORE_JSON_SCHEMA",
    "LM_STUDIO",
    "PROMPT_ONLY",
    "STAND_IN_BANNER",
    "STAND_IN_MODEL",
    "TOOLS_ONLY",
    "VLLM_JSON_OBJECT_ONLY",
    "Answer",
    "Certificates",
    "ChatRequest",
    "Dialect",
    "Dropped",
    "FakeOpenAIServer",
    "Malformed",
    "RateLimited",
    "Refusal",
    "Reply",
    "Responder",
    "SchemaViolation",
    "ServerError",
    "Slow",
    "StandInResponder",
    "citing",
    "conversation_of",
    "make_certificates",
    "make_snapshot",
    "turn_seqs",
]
