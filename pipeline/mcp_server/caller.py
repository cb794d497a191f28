"""The caller an MCP server acts for, and how the SDK's errors reach its client.

:class:`FixedCaller` is fixed when the server starts (one user of one project);
tools can only vary the session. :func:`tool_errors` turns an SDK error into the
one line a client reads (see :mod:`mongomem.mcp_server.server` for the table).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from mongomem.errors import ConfigError, InputError, MongomemError, ScopeError
from mongomem.extras import require
from mongomem.mcp_server.config import McpServerConfig
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, MemoryRecord

with require("mcp"):
    from mcp.server.mcpserver.exceptions import ToolError

__all__ = ["FixedCaller", "Lookup", "describe_error", "tool_errors"]

R = TypeVar("R", bound=MemoryRecord)


class Lookup(BaseModel, Generic[R]):
    """The result of a ``get_*`` tool: the memory, or ``found: false``."""

    model_config = ConfigDict(frozen=True)

    found: bool
    memory: R | None = None


def describe_error(exc: MongomemError, aliases: Mapping[str, str] | None = None) -> str:
    """The one line a client reads for an error the SDK raised on purpose."""
    if isinstance(exc, InputError):
        field = exc.field
        if field is not None and aliases:
            field = aliases.get(field, field)
        return f"invalid input ({field}): {exc}" if field else f"invalid input: {exc}"
    if isinstance(exc, ScopeError):
        return f"not allowed: {exc}"
    hint = " (temporary; try again)" if exc.retriable else ""
    return f"{type(exc).__name__}: {exc}{hint}"


@contextmanager
def tool_errors(aliases: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn the SDK's errors into :class:`ToolError` (``aliases``: SDK field → tool argument)."""
    try:
        yield
    except MongomemError as exc:
        raise ToolError(describe_error(exc, aliases)) from exc


class FixedCaller:
    """The one caller a server acts for; :meth:`bind` can only vary the session."""

    def __init__(self, memory: AsyncMemory, config: McpServerConfig) -> None:
        if memory.project_id != config.project_id:
            raise ConfigError(
                f"the memory is of project {memory.project_id!r}, "
                f"the server was configured for {config.project_id!r}"
            )
        self.memory = memory
        self.config = config
        self.default = memory.bind(config.request_context())  # fails early on a bad identity

    def bind(self, session_id: str | None = None) -> AsyncBoundMemory:
        """The caller's memory, in ``session_id`` (a session of the same user) or the default."""
        if session_id is None:
            return self.default
        with tool_errors():
            return self.memory.bind(self.config.request_context(session_id))

    def describe(self) -> dict[str, Any]:
        who = self.default.identity
        return {
            "project_id": who.project_id,
            "user_id": who.user_id,
            "service_account": who.service_account,
            "default_session_id": who.session_id,
        }
