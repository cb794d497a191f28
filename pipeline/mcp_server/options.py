"""The options of ``mongomem mcp``: argparse only, so the ``mongomem`` parser loads fast."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``mongomem mcp`` (and ``python -m mongomem.mcp_server``)."""
    parser.add_argument("--project-id", required=True, help="the project whose memory is served")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user-id", help="the end user every call acts for (SPEC F2)")
    who.add_argument(
        "--service-account",
        help="act as this service account's own identity (SPEC F1: one shared user scope)",
    )
    parser.add_argument(
        "--session-id",
        default=None,
        help="default session of record_turn/recent_turns (default: a new id per launch)",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="stdio (default; what desktop MCP clients launch) or streamable-http",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="streamable-http: address to bind (127.0.0.1; any other host needs "
        "MONGOMEM_MCP_AUTH_TOKEN)",
    )
    parser.add_argument(
        "--port", type=int, default=8765, help="streamable-http: port to listen on (8765)"
    )
