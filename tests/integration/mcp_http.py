"""Driving ``mongomem mcp --transport streamable-http`` as a real subprocess (tests)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_stdio import TIMEOUT

#: The token tests run a server with; sent as ``Authorization: Bearer <TOKEN>``.
TOKEN = "test-token-9f86d081884c7d65"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def without_token(env: dict[str, str]) -> dict[str, str]:
    """``env`` with no ``MONGOMEM_MCP_AUTH_TOKEN`` (a developer's shell may set one)."""
    return {k: v for k, v in env.items() if k != "MONGOMEM_MCP_AUTH_TOKEN"}


@asynccontextmanager
async def http_server(
    env: dict[str, str],
    *args: str,
    command: Sequence[str] = ("mongomem.cli", "mcp"),
    stderr: IO[Any] | None = None,
    scheme: str = "http",
) -> AsyncIterator[str]:
    """Run ``python -m <command> <args> --transport streamable-http`` on a free loopback port
    until the block ends; yields the endpoint's URL (``scheme``: ``https`` when ``env`` sets
    the TLS files) once the port accepts connections."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *command,
        *args,
        "--transport",
        "streamable-http",
        "--port",
        str(port),
        env={**env, "PYTHONPATH": os.getcwd()},
        stderr=stderr,
    )
    try:
        for _ in range(300):
            assert process.returncode is None, "the server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        yield f"{scheme}://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), timeout=10)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def http_client(
    url: str, token: str | None = None, verify: ssl.SSLContext | bool = True
) -> AsyncIterator[Client]:
    """The official MCP client over streamable HTTP, sending ``token`` as a bearer token;
    an ``https`` server's certificate is checked with ``verify``."""
    headers = None if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=TIMEOUT, verify=verify) as http,
        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=TIMEOUT) as c,
    ):
        yield c
