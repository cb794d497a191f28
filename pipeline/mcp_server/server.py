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
from typing import Any

from mcp_types import CallToolResult, InputRequiredResult

from mongomem import __version__
from mongomem.errors import MongomemError
from mongomem.extras import require
from mongomem.mcp_server.caller import FixedCaller, describe_error
from mongomem.mcp_server.config import McpServerConfig
from mongomem.mcp_server.space_tools import LazySpaces, register_space_tools
from mongomem.mcp_server.tools import register_tools
from mongomem.sdk import AsyncMemory

with require("mcp"):
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError

__all__ = ["MemoryMcpServer", "build_server"]

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
    caller = FixedCaller(memory, config)
    server = MemoryMcpServer(
        "mongomem",
        title="mongomem memory",
        version=__version__,
        instructions=INSTRUCTIONS + (SPACES_INSTRUCTIONS if spaces is not None else ""),
        log_level="WARNING",
    )
    register_tools(server, caller)
    if spaces is not None:
        register_space_tools(server, caller, spaces)
    _register_resources(server, caller)
    return server


def _register_resources(server: MCPServer[Any], caller: FixedCaller) -> None:
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
