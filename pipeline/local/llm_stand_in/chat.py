"""One chat-completions request as the local OpenAI-compatible server received it, and an answer.

:class:`ChatRequest` reads what a request asks for wherever its
structured-output mode puts it (see :func:`mongomem.adapters.llm.schema_instruction`):
the mode, the schema's name and the schema itself. :class:`Answer` is what a
responder gives back: the server renders it as the assistant message, or as
the arguments of the forced tool call when the request was in ``tools`` mode.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = ["Answer", "ChatRequest", "Responder"]


#: How :func:`mongomem.adapters.llm.schema_instruction` states a schema in the system message.
_STATED = re.compile(r'fit this JSON schema "([^"]+)":\n(\{[^\n]*\})')


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions request as the server received it (``at``: monotonic seconds)."""

    body: Mapping[str, Any]
    at: float = field(default_factory=time.monotonic)
    #: The request's headers, names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def call_id(self) -> str | None:
        """The id mongomem's LLM adapter sends with each request (``x-mongomem-call``), if any:
        the ``_id`` of the request's row in ``llm_usage``."""
        return self.headers.get("x-mongomem-call")

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        messages = self.body.get("messages")
        return list(messages) if isinstance(messages, list) else []

    @property
    def mode(self) -> str:
        """How the request asks for structure: ``json_schema``, ``json_object``, ``tools``,
        ``prompt`` (none of those fields), or ``text`` (``response_format`` type text)."""
        fmt = self.body.get("response_format")
        if isinstance(fmt, Mapping) and isinstance(fmt.get("type"), str):
            return str(fmt["type"])
        if self.body.get("tools"):
            return "tools"
        return "prompt"

    @property
    def schema_name(self) -> str | None:
        """The schema's name, wherever the mode puts it (see ``llm.schema_instruction``)."""
        fmt = self.body.get("response_format")
        if isinstance(fmt, Mapping) and isinstance(fmt.get("json_schema"), Mapping):
            name = fmt["json_schema"].get("name")
            return name if isinstance(name, str) else None
        tool = self._tool()
        if tool is not None:
            name = tool.get("name")
            return name if isinstance(name, str) else None
        stated = self._stated_schema()
        return stated[0] if stated else None

    @property
    def schema(self) -> Mapping[str, Any] | None:
        """The JSON schema the request asks the answer to fit, wherever the mode puts it."""
        fmt = self.body.get("response_format")
        if isinstance(fmt, Mapping):
            inner = fmt.get("json_schema")
            schema = inner.get("schema") if isinstance(inner, Mapping) else fmt.get("schema")
            if isinstance(schema, Mapping):
                return schema
        tool = self._tool()
        if tool is not None and isinstance(tool.get("parameters"), Mapping):
            return cast("Mapping[str, Any]", tool["parameters"])
        stated = self._stated_schema()
        return stated[1] if stated else None

    def _tool(self) -> Mapping[str, Any] | None:
        tools = self.body.get("tools")
        if isinstance(tools, list) and tools and isinstance(tools[0], Mapping):
            function = tools[0].get("function")
            return function if isinstance(function, Mapping) else None
        return None

    def _stated_schema(self) -> tuple[str, Mapping[str, Any]] | None:
        """The schema stated in the system message (``json_object`` and ``prompt`` modes)."""
        found = _STATED.search(self.text("system"))
        if found is None:
            return None
        try:
            schema = json.loads(found.group(2))
        except json.JSONDecodeError:
            return None
        return (found.group(1), schema) if isinstance(schema, Mapping) else None

    def text(self, role: str | None = None) -> str:
        """All message contents (of one role) joined by newlines."""
        return "\n".join(
            str(m.get("content", ""))
            for m in self.messages
            if role is None or m.get("role") == role
        )


@dataclass(frozen=True)
class Answer:
    """HTTP 200 with ``content`` (a mapping is sent as JSON text) as the assistant message."""

    content: Mapping[str, Any] | str
    finish_reason: str = "stop"
    model: str | None = None


#: A function from a request to its answer (the stand-in's rules are one).
Responder = Callable[[ChatRequest], Answer]
