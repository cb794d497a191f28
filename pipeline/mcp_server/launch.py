"""Running the MCP server: ``python -m mongomem.mcp_server`` / ``mongomem mcp``.

The process serves one caller (see :mod:`mongomem.mcp_server`) until its
client goes away: over stdio it stops when stdin closes; over streamable HTTP
it runs until interrupted, behind ``MONGOMEM_MCP_AUTH_TOKEN`` when that is set
and over HTTPS with ``MONGOMEM_MCP_TLS_CERT_FILE`` and ``…_KEY_FILE``
(:mod:`mongomem.mcp_server.http`). Logs go to stderr as JSON lines, so stdout
carries nothing but the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from functools import partial

from pydantic import ValidationError

from mongomem.adapters.tls import server_context
from mongomem.errors import MongomemError
from mongomem.logs import configure_logging
from mongomem.mcp_server.config import McpServerConfig, config_from_args, parse_args
from mongomem.mcp_server.http import check_http_auth, serve_http
from mongomem.mcp_server.server import build_server
from mongomem.mcp_server.space_tools import LazySpaces
from mongomem.sdk import AsyncMemory, MemoryTransport
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.settings import Settings, resolve_settings

__all__ = ["main", "run", "run_from_args", "serve"]


async def serve(
    settings: Settings,
    config: McpServerConfig,
    *,
    transport: MemoryTransport | None = None,
    spaces: SpacesTransport | None = None,
) -> None:
    """Serve until the client leaves. ``transport`` (default: direct, from ``settings``) is
    any :class:`~mongomem.sdk.MemoryTransport`; ``spaces`` (default: an
    :class:`~mongomem.spaces.AsyncSpaces` of the project, made on the first spaces call)
    serves the memory-space tools. Both are closed when the server stops.

    Streamable HTTP off loopback without ``settings.mcp.auth_token``, or with a TLS
    certificate and key (``settings.mcp.tls_cert_file``, ``tls_key_file``) that cannot be
    loaded, is a :class:`~mongomem.errors.ConfigError`, raised before anything is opened.
    Over stdio the TLS settings are not used."""
    mcp = settings.mcp
    check_http_auth(config, mcp.auth_token)
    tls = None
    if config.transport == "streamable-http":
        tls = server_context(mcp.tls_cert_file, mcp.tls_key_file, "MONGOMEM_MCP_")
    lazy = LazySpaces(spaces if spaces is not None else partial(_direct_spaces, settings, config))
    try:
        async with AsyncMemory(
            project_id=config.project_id, settings=settings, transport=transport
        ) as memory:
            server = build_server(memory, config, spaces=lazy)
            if config.transport == "stdio":
                await server.run_stdio_async()
            else:
                await serve_http(server, config, mcp.auth_token, tls=tls)
    finally:
        await lazy.close()


def _direct_spaces(settings: Settings, config: McpServerConfig) -> SpacesTransport:
    from mongomem.spaces import AsyncSpaces

    return AsyncSpaces(settings, project_id=config.project_id)


def run(
    settings: Settings,
    config: McpServerConfig,
    *,
    transport: MemoryTransport | None = None,
    spaces: SpacesTransport | None = None,
) -> int:
    """Configure logging and serve (blocking); the exit status."""
    configure_logging("mcp", settings.log_level)
    try:
        asyncio.run(serve(settings, config, transport=transport, spaces=spaces))
    except KeyboardInterrupt:
        return 130
    return 0


def run_from_args(args: argparse.Namespace, settings: Settings) -> int:
    """``mongomem mcp``: ``args`` as parsed with :func:`~mongomem.mcp_server.add_arguments`."""
    try:
        config = config_from_args(args)
    except ValidationError as exc:
        raise MongomemError(f"bad MCP server options: {_first(exc)}") from exc
    return run(settings, config)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mongomem.mcp_server [options]``; errors print one line, status 1."""
    try:
        config = parse_args(argv)
        return run(resolve_settings(), config)
    except ValidationError as exc:
        print(f"mongomem mcp: bad options: {_first(exc)}", file=sys.stderr)
    except MongomemError as exc:
        print(f"mongomem mcp: {exc}", file=sys.stderr)
    return 1


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
