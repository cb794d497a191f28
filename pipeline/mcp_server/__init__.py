"""An MCP server over mongomem memory (SPEC G3), on the official ``mcp`` SDK.

::

    mongomem mcp --project-id travel-agent --user-id user_1            # stdio
    python -m mongomem.mcp_server --project-id travel-agent --user-id user_1

**Identity (F1–F3).** One server process acts for exactly one caller, fixed
at launch: ``--project-id`` plus either ``--user-id`` (an end user, F2) or
``--service-account`` (the account's own identity, F1). This matches how MCP
clients work: a desktop client launches one stdio server per configured
entry, for the one person using it. Tools take **no** project or user id; an
argument a tool does not declare (``user_id="someone-else"``) is refused
before anything runs, so no call can widen the scope (F3). A tool that works
on a session takes an optional ``session_id``, which can only name another
session *of the same user*; it defaults to ``--session-id``, or to a fresh
``mcp-<UTC time>-<random>`` id per launch. Taxonomic terms are project-wide,
as in the SDK.

**Tools.** ``record_turn``, ``recent_turns``, ``end_session``, ``list_sessions`` (short-term
memory); ``save_semantic``/``get_semantic``/``search_semantic``;
``save_episode``/``search_episodes``/``list_episodes``;
``save_procedure``/``discover_procedures``/``get_procedure``;
``save_taxonomic``/``get_taxonomic_term``/``search_taxonomic``/``list_domains``;
``build_context``, ``memory_history`` and ``whoami``. Each maps onto one call of
:class:`~mongomem.sdk.AsyncBoundMemory`, so saves go through the same
reconciliation as extracted memories (E2). Results are the SDK's models, as
structured content and as JSON text. ``get_*`` tools answer
``{"found": false}`` rather than failing.

**Memory spaces (SPEC H).** ``list_spaces``, ``recall_cases``, ``add_case``,
``check_escalation``, ``resolve_escalation`` and ``playground`` work on the
spaces of the server's project, which all of its agents share; the caller is
recorded as the agent of what it adds. Admin calls (creating, editing,
deleting, export, import) are not tools; see
:mod:`mongomem.mcp_server.space_tools` for the mapping and why. The spaces
client is made on the first spaces call and closed when the server stops
(:func:`serve` takes one, e.g. an :class:`~mongomem.sdk.spaces.HttpSpaces`).

**Resources.** ``mongomem://identity`` (whom the server acts for) and
``mongomem://sessions/{session_id}/turns`` (the last 50 turns of a session).

**Errors.** Bad input is a tool result with ``isError`` set whose text names
the argument (``invalid input (role): …``); the SDK validates before writing,
so nothing partial is stored. See :mod:`mongomem.mcp_server.server`.

**Transports.** stdio (default) and streamable HTTP (``--transport
streamable-http``, bound to 127.0.0.1:8765 by default, endpoint ``/mcp``).
The HTTP endpoint acts for the launch identity, so with
``MONGOMEM_MCP_AUTH_TOKEN`` set every request must carry ``Authorization:
Bearer <token>`` (else ``401``); without one the server refuses any host but
loopback. See :mod:`mongomem.mcp_server.http`.
Memory is reached through any :class:`~mongomem.sdk.MemoryTransport`
(:func:`serve` takes one; default: the direct MongoDB transport from
settings), so the same server works over the HTTP memory service (G2).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mongomem.mcp_server.caller import FixedCaller, Lookup, describe_error, tool_errors
    from mongomem.mcp_server.config import McpServerConfig, config_from_args, parse_args
    from mongomem.mcp_server.launch import main, run, run_from_args, serve
    from mongomem.mcp_server.options import add_arguments
    from mongomem.mcp_server.server import MemoryMcpServer, build_server
    from mongomem.mcp_server.space_tools import LazySpaces

__all__ = [
    "FixedCaller",
    "LazySpaces",
    "Lookup",
    "McpServerConfig",
    "MemoryMcpServer",
    "add_arguments",
    "build_server",
    "config_from_args",
    "describe_error",
    "main",
    "parse_args",
    "run",
    "run_from_args",
    "serve",
    "tool_errors",
]

#: Every name loads on first use, so that building the ``mongomem`` argument
#: parser (which calls :func:`add_arguments`) loads neither the SDK nor the ``mcp`` one.
_LAZY = {
    "McpServerConfig": "config",
    "config_from_args": "config",
    "parse_args": "config",
    "add_arguments": "options",
    "main": "launch",
    "run": "launch",
    "run_from_args": "launch",
    "serve": "launch",
    "FixedCaller": "caller",
    "Lookup": "caller",
    "MemoryMcpServer": "server",
    "build_server": "server",
    "describe_error": "caller",
    "tool_errors": "caller",
    "LazySpaces": "space_tools",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"mongomem.mcp_server.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
