"""Driving ``mongomem mcp`` as a real stdio subprocess with the official MCP client (tests)."""

from __future__ import annotations

import os
import sys
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

#: Seconds one request may take (the first one connects to MongoDB and builds indexes).
TIMEOUT = 60.0


def stdio_server(env: dict[str, str], project: str, *args: str) -> Client:
    """A client that launches ``mongomem mcp`` (``python -m mongomem.cli mcp``) over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mongomem.cli", "mcp", "--project-id", project, *args],
        env={**env, "PYTHONPATH": os.getcwd()},
        cwd=os.getcwd(),
    )
    return Client(params, read_timeout_seconds=TIMEOUT)


def ok(result: Any) -> Any:
    """The structured content of a successful tool call."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    return result.structured_content


def error(result: Any) -> str:
    """The text of a failed tool call."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, text
    return text
