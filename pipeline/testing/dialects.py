"""How real OpenAI-compatible servers treat the structured-output modes, for the fake server.

A :class:`Dialect` makes :class:`~mongomem.testing.FakeOpenAIServer` accept
only some modes (see :attr:`ChatRequest.mode <mongomem.testing.ChatRequest.mode>`)
and refuse the others with the status and body the named server sends, so
the adapter's fallback (``MONGOMEM_LLM_STRUCTURED_OUTPUT=auto``) is tested
through the real ``openai`` client against refusals as they arrive in the
wild. These are scripted stand-ins, NOT the servers: only the refusal and
the accepted modes are modelled, and a mode a dialect neither accepts nor
describes is refused with a generic 400 that says so.

* :data:`LLAMA_CPP_PYTHON` — llama-cpp-python's server: ``json_schema`` is
  refused with HTTP 500 and the pydantic message "Input should be 'text' or
  'json_object'"; ``{"type": "json_object", "schema": ...}`` works.
* :data:`LLAMA_SERVER_BEFORE_JSON_SCHEMA` — llama.cpp's ``llama-server`` before it
  took ``json_schema`` (and ik_llama.cpp builds reported in 2025): HTTP 500
  'response_format type must be one of "text" or "json_object", but got:
  json_schema'.
* :data:`VLLM_JSON_OBJECT_ONLY` — a vLLM build whose request model predates
  ``json_schema``: HTTP 400 in vLLM's error shape (``"object": "error"``).
* :data:`LM_STUDIO` — ``json_schema`` only; ``json_object`` is refused (400).
* :data:`TOOLS_ONLY` — a gateway that forwards tool calls but refuses
  ``response_format`` ("Unsupported parameter").
* :data:`PROMPT_ONLY` — refuses both ``response_format`` and ``tools`` (422,
  FastAPI's "Extra inputs are not permitted") and wraps answers in a code
  fence, as chatty models do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LLAMA_CPP_PYTHON",
    "LLAMA_SERVER_BEFORE_JSON_SCHEMA",
    "LM_STUDIO",
    "PROMPT_ONLY",
    "TOOLS_ONLY",
    "VLLM_JSON_OBJECT_ONLY",
    "Dialect",
    "Refusal",
]


@dataclass(frozen=True)
class Refusal:
    """The HTTP status and JSON body a server refuses a mode with."""

    status: int
    body: Mapping[str, Any]


def _openai_error(message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _unmodelled(mode: str) -> Refusal:
    return Refusal(
        400,
        _openai_error(f"mode {mode!r} is not modelled by this fake dialect", "invalid_request"),
    )


@dataclass(frozen=True)
class Dialect:
    """Which modes a server accepts, and how it refuses the others."""

    name: str
    accepts: frozenset[str]
    refusals: Mapping[str, Refusal] = field(default_factory=dict)
    fenced: bool = False  # answers without an enforced format come in a code fence

    def refusal(self, mode: str) -> Refusal:
        return self.refusals.get(mode) or _unmodelled(mode)


def _literal_error(mode: str) -> str:
    return (
        "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
        f"  Input should be 'text' or 'json_object' [type=literal_error, input_value='{mode}', "
        "input_type=str]"
    )


LLAMA_CPP_PYTHON = Dialect(
    name="llama-cpp-python",
    accepts=frozenset({"json_object", "prompt"}),
    refusals={
        "json_schema": Refusal(
            500, _openai_error(_literal_error("json_schema"), "internal_server_error")
        ),
    },
)

LLAMA_SERVER_BEFORE_JSON_SCHEMA = Dialect(
    name="llama-server (before json_schema)",
    accepts=frozenset({"json_object", "prompt"}),
    refusals={
        "json_schema": Refusal(
            500,
            {
                "error": {
                    "code": 500,
                    "message": (
                        'response_format type must be one of "text" or "json_object", '
                        "but got: json_schema"
                    ),
                    "type": "server_error",
                }
            },
        ),
    },
)

VLLM_JSON_OBJECT_ONLY = Dialect(
    name="vllm (before json_schema)",
    accepts=frozenset({"json_object", "tools", "prompt"}),
    refusals={
        "json_schema": Refusal(
            400,
            {
                "object": "error",
                "message": (
                    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
                    "'ctx': {'expected': \"'text' or 'json_object'\"}}]"
                ),
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
    },
)

LM_STUDIO = Dialect(
    name="lm-studio",
    accepts=frozenset({"json_schema", "tools", "prompt"}),
    refusals={
        "json_object": Refusal(400, {"error": "'response_format.type' must be 'json_schema'"})
    },
)

_UNSUPPORTED_FORMAT = Refusal(
    400,
    _openai_error(
        "Unsupported parameter: 'response_format' is not supported with this model.",
        "invalid_request_error",
        "response_format",
    ),
)

TOOLS_ONLY = Dialect(
    name="tools only",
    accepts=frozenset({"tools", "prompt"}),
    refusals={"json_schema": _UNSUPPORTED_FORMAT, "json_object": _UNSUPPORTED_FORMAT},
)


def _extra_input(name: str) -> Refusal:
    return Refusal(
        422,
        {
            "detail": [
                {
                    "type": "extra_forbidden",
                    "loc": ["body", name],
                    "msg": "Extra inputs are not permitted",
                }
            ]
        },
    )


PROMPT_ONLY = Dialect(
    name="prompt only",
    accepts=frozenset({"prompt"}),
    refusals={
        "json_schema": _extra_input("response_format"),
        "json_object": _extra_input("response_format"),
        "tools": _extra_input("tools"),
    },
    fenced=True,
)
