"""What the fake OpenAI-compatible server answers: scripted answers and faults.

A test scripts a queue of replies, or a responder (a function of the
request). Faults are replies too, so a script reads like the story of a call::

    server.script(RateLimited(retry_after=0.2), ServerError(), Answer({"items": []}))

:class:`ChatRequest` and :class:`Answer` are the product's
(:mod:`mongomem.local.llm_stand_in.chat`, the stand-in answers with them too); the
faults are the test double's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mongomem.local.llm_stand_in.chat import Answer, ChatRequest

__all__ = [
    "Answer",
    "ChatRequest",
    "Dropped",
    "Malformed",
    "RateLimited",
    "Reply",
    "Responder",
    "SchemaViolation",
    "ServerError",
    "Slow",
    "citing",
    "conversation_of",
    "turn_seqs",
]


def turn_seqs(request: ChatRequest) -> list[int]:
    """The seqs of the conversation turns an extraction request carries (one JSON line each)."""
    seqs = []
    for line in conversation_of(request).splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and isinstance(value.get("seq"), int) and "role" in value:
                seqs.append(value["seq"])
    return seqs


def citing(request: ChatRequest, items: list[dict[str, Any]]) -> dict[str, Any]:
    """An extraction answer whose items that cite nothing cite every turn of the request
    (SPEC L4: an item citing no turn of its window is dropped)."""
    seqs = turn_seqs(request)
    return {"items": [{**item, "seqs": item.get("seqs") or seqs} for item in items]}


def conversation_of(request: ChatRequest) -> str:
    """The user-message text of a request (where extraction prompts put the conversation)."""
    return request.text("user")


@dataclass(frozen=True)
class RateLimited:
    """HTTP 429, with ``Retry-After: <seconds>`` when ``retry_after`` is set."""

    retry_after: float | None = 1.0


@dataclass(frozen=True)
class ServerError:
    """An HTTP 5xx (or any status) with an OpenAI-style error body."""

    status: int = 500
    message: str = "injected server error"


@dataclass(frozen=True)
class Slow:
    """Wait ``seconds`` before sending ``then`` (a client timeout fires first if shorter)."""

    seconds: float
    then: Reply = field(default_factory=lambda: Answer({"items": []}))


@dataclass(frozen=True)
class Dropped:
    """HTTP 200 whose headers announce the whole answer, then ``after_bytes`` bytes of
    the body, then the connection is closed: a connection lost mid-body."""

    after_bytes: int = 16
    then: Answer = field(default_factory=lambda: Answer({"items": []}))


@dataclass(frozen=True)
class Malformed:
    """HTTP 200 whose assistant message is not JSON."""

    content: str = '{"items": [ this is not json'


@dataclass(frozen=True)
class SchemaViolation:
    """HTTP 200 with valid JSON that does not fit the requested schema."""

    content: Mapping[str, Any] = field(
        default_factory=lambda: {"items": [{"unexpected": True}], "extra": 1}
    )


Reply = Answer | RateLimited | ServerError | Slow | Dropped | Malformed | SchemaViolation
Responder = Callable[[ChatRequest], Reply]
