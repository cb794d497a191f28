"""The MCP server's streamable-HTTP transport behind ``MONGOMEM_MCP_AUTH_TOKEN``, as a real
subprocess driven over HTTP (SPEC G3; F3: whoever reaches the endpoint acts as its caller)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from mcp import MCPError
from mcp_http import TOKEN, free_port, http_client, http_server, without_token
from mcp_stdio import ok
from pymongo import AsyncMongoClient
from refused import refused_start

from mongomem.adapters.mongo import Document

pytestmark = pytest.mark.integration

PROJECT = "travel"
SERVER = ("--project-id", PROJECT, "--user-id", "alice", "--session-id", "s1")


@pytest.fixture
def env(subprocess_env: dict[str, str]) -> dict[str, str]:
    return {
        **without_token(subprocess_env),
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "64",
        "MONGOMEM_LOG_LEVEL": "INFO",
    }


async def test_with_a_token_only_requests_carrying_it_are_served(
    env: dict[str, str], mongo: AsyncMongoClient[Document], tmp_path: Path
) -> None:
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        async with (
            http_server({**env, "MONGOMEM_MCP_AUTH_TOKEN": TOKEN}, *SERVER, stderr=stderr) as url,
            httpx.AsyncClient(timeout=30) as raw,
        ):
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            accept = {"Accept": "application/json, text/event-stream"}
            for headers in [
                accept,
                {**accept, "Authorization": "Bearer wrong-token"},
                {**accept, "Authorization": f"Bearer {TOKEN}x"},
                {**accept, "Authorization": f"Basic {TOKEN}"},
            ]:
                refused = await raw.post(url, json=initialize, headers=headers)
                assert refused.status_code == 401, headers
                assert refused.headers["WWW-Authenticate"].startswith("Bearer")
                assert refused.json()["error"]["type"] == "AuthError"
            for method in ("GET", "DELETE"):
                assert (await raw.request(method, url, headers=accept)).status_code == 401

            async with http_client(url, token=TOKEN) as client:
                turn = {"role": "user", "content": "with a token"}
                ok(await client.call_tool("record_turn", turn))
                turns = ok(await client.call_tool("recent_turns", {}))["result"]
                assert [(t["session_id"], t["content"]) for t in turns] == [("s1", "with a token")]

            # The official client with the wrong token gets no session at all.
            with pytest.raises(ExceptionGroup) as caught:
                async with http_client(url, token="wrong-token"):
                    pass
            assert caught.group_contains(MCPError, depth=None)

    logged = log.read_text()
    assert "bearer-token authentication on" in logged
    assert TOKEN not in logged


async def test_without_a_token_a_host_off_loopback_is_refused_before_it_starts(
    env: dict[str, str],
) -> None:
    code, stderr = await refused_start(
        "-m",
        "mongomem.cli",
        "mcp",
        *SERVER,
        "--transport",
        "streamable-http",
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        env=env,
    )
    assert code == 1  # what every configuration error exits with
    assert stderr == (
        "mongomem: refusing to serve MCP over HTTP on '0.0.0.0' without a token: "
        "set MONGOMEM_MCP_AUTH_TOKEN, or listen on 127.0.0.1"
    )


async def test_without_a_token_loopback_serves_every_request_as_before(
    env: dict[str, str], mongo: AsyncMongoClient[Document], tmp_path: Path
) -> None:
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        async with http_server(env, *SERVER, stderr=stderr) as url, http_client(url) as client:
            ok(await client.call_tool("record_turn", {"role": "user", "content": "no token"}))
            turns = ok(await client.call_tool("recent_turns", {}))["result"]
            assert [t["content"] for t in turns] == ["no token"]
    assert "no authentication (MONGOMEM_MCP_AUTH_TOKEN unset)" in log.read_text()
