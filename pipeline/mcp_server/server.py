"""The MCP server object: strict argument checking, error mapping, resources.

:func:`build_server` assembles an :class:`MemoryMcpServer` (an ``MCPServer``
of the official SDK) over an :class:`~mongomem.sdk.AsyncMemory`. Tool bodies
live in :mod:`mongomem.mcp_server.tools` and, for memory spaces,
:mod:`mongomem.mcp_server.space_tools`.

Errors reach the client as tool results with ``isError`` set, never as a
crash of the server:

====================================  =============================================
raised                                the client reads
====================================  =============================================
unknown argument (e.g. ``user_id``)   ``unknown argument 'user_id' …`` (nothing runs)
argument of the wrong type/range      the SDK's validation message, naming the field
:class:`~mongomem.errors.InputError`  ``invalid input (<field>): <message>``
:class:`~mongomem.errors.ScopeError`  ``not allowed: <message>``
other ``MongomemError``               ``<Class>: <message>`` (+ "try again" if retriable)
anything else                         ``Error executing tool <name>`` (logged here)
====================================  =============================================

The SDK validates a call completely before it writes, so a rejected call has
stored nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mcp_types import CallToolResult, InputRequiredResult
from pydantic import BaseModel, ConfigDict

from mongomem import __version__
from mongomem.errors import ConfigError, InputError, MongomemError, ScopeError
from mongomem.extras import require
from mongomem.mcp_server.config import McpServerConfig
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, MemoryRecord

if TYPE_CHECKING:
    from mongomem.mcp_server.space_tools import LazySpaces

with require("mcp"):
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError

__all__ = [
    "Caller",
    "Lookup",
    "MemoryMcpServer",
    "build_server",
    "describe_error",
    "tool_errors",
]

INSTRUCTIONS = """\
Long-term memory (mongomem) of one user of one project, fixed when this server \
was started; no argument can reach another user's or project's memory.
Record each conversation turn with record_turn; read a session back with \
recent_turns. Save what is worth remembering with save_semantic (facts), \
save_episode (what happened), save_procedure (how to do something) or \
save_taxonomic (a project-wide glossary term). Before answering, call \
build_context with the user's request to get relevant memories as text."""
SPACES_INSTRUCTIONS = """
Memory spaces hold the project's past cases, shared by all of its agents: \
list_spaces, then recall_cases before acting and add_case after; call \
check_escalation before raising an escalation."""

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


class Caller:
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


class MemoryMcpServer(MCPServer[Any]):
    """An ``MCPServer`` that refuses arguments a tool does not declare.

    The SDK ignores unknown arguments; refusing them means a client that tries
    ``user_id="someone-else"`` learns at once that the scope is fixed (F3).
    """

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tools = {t.name: t for t in await self.list_tools()}
        declared = set(tools[name].input_schema.get("properties", {})) if name in tools else None
        unknown = [] if declared is None else sorted(set(arguments) - declared)
        if unknown:
            raise ToolError(
                f"unknown argument {unknown[0]!r} for {name}: this server acts for one user "
                "and project, fixed when it was started; arguments cannot change them"
            )
        return await super().call_tool(name, arguments, context)


def build_server(
    memory: AsyncMemory, config: McpServerConfig, *, spaces: LazySpaces | None = None
) -> MemoryMcpServer:
    """An MCP server for ``config``'s caller over ``memory`` (any transport of the SDK).

    With ``spaces``, it also serves the memory-space tools of ``config``'s project
    (:mod:`mongomem.mcp_server.space_tools`); whoever made ``spaces`` closes it.
    """
    from mongomem.mcp_server.tools import register_tools

    caller = Caller(memory, config)
    server = MemoryMcpServer(
        "mongomem",
        title="mongomem memory",
        version=__version__,
        instructions=INSTRUCTIONS + (SPACES_INSTRUCTIONS if spaces is not None else ""),
        log_level="WARNING",
    )
    register_tools(server, caller)
    if spaces is not None:
        from mongomem.mcp_server.space_tools import register_space_tools

        register_space_tools(server, caller, spaces)
    _register_resources(server, caller)
    return server


def _register_resources(server: MCPServer[Any], caller: Caller) -> None:
    @server.resource(
        "mongomem://identity",
        name="identity",
        description="Whom this server acts for: project, user, default session.",
        mime_type="application/json",
    )
    def identity() -> str:
        return json.dumps(caller.describe())

    @server.resource(
        "mongomem://sessions/{session_id}/turns",
        name="session-turns",
        description="The last 50 turns of one of this user's sessions, oldest first.",
        mime_type="application/json",
    )
    async def session_turns(session_id: str) -> str:
        try:
            turns = await caller.bind(session_id).recent_turns(limit=50)
        except ToolError as exc:
            raise ResourceError(str(exc)) from exc
        except MongomemError as exc:
            raise ResourceError(describe_error(exc)) from exc
        return json.dumps([t.model_dump(mode="json") for t in turns])
