"""The MCP server's HTTP bearer token: the middleware alone, and when a server may start."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.types import Receive, Scope, Send

from mongomem.errors import ConfigError
from mongomem.mcp_server import McpServerConfig
from mongomem.mcp_server.http import BearerAuth, check_http_auth

TOKEN = SecretStr("s3cret-token")
MISSING = "missing bearer token (Authorization: Bearer <token>)"


class Inner:
    """The wrapped app: answers 200 and remembers each scope type it was called with."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"inner"})


async def _post(app: BearerAuth, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/mcp", json={}, headers=headers)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, MISSING),
        ({"Authorization": "Bearer "}, MISSING),
        ({"Authorization": "Basic czNjcmV0LXRva2Vu"}, MISSING),
        ({"Authorization": "s3cret-token"}, MISSING),
        ({"Authorization": "Bearer s3cret-token-and-more"}, "wrong bearer token"),
        ({"Authorization": "Bearer s3cret-toke"}, "wrong bearer token"),
        ({"Authorization": "Bearer S3CRET-TOKEN"}, "wrong bearer token"),
    ],
)
async def test_a_request_without_the_token_is_401_and_never_reaches_the_app(
    headers: dict[str, str], message: str
) -> None:
    inner = Inner()
    response = await _post(BearerAuth(inner, TOKEN), headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json() == {
        "error": {"type": "AuthError", "message": message, "retriable": False}
    }
    assert "s3cret-token" not in response.text
    assert inner.seen == []


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_the_token_lets_a_request_through(scheme: str) -> None:
    inner = Inner()
    response = await _post(BearerAuth(inner, TOKEN), {"Authorization": f"{scheme} s3cret-token"})
    assert (response.status_code, response.text) == (200, "inner")
    assert inner.seen == ["http"]


async def test_lifespan_events_pass_through_without_a_token() -> None:
    inner = Inner()

    async def receive() -> dict[str, str]:
        return {"type": "lifespan.startup"}

    async def send(message: object) -> None:
        raise AssertionError("the middleware answered a lifespan event itself")

    await BearerAuth(inner, TOKEN)({"type": "lifespan"}, receive, send)
    assert inner.seen == ["lifespan"]


async def test_a_websocket_without_the_token_is_closed_before_it_is_accepted() -> None:
    inner = Inner()
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, str]:
        return {"type": "websocket.connect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "headers": [(b"authorization", b"Bearer nope")]}
    await BearerAuth(inner, TOKEN)(scope, receive, send)
    assert [m["type"] for m in sent] == ["websocket.close"]
    assert sent[0]["code"] == 1008
    assert inner.seen == []


def _config(transport: str = "streamable-http", host: str = "127.0.0.1") -> McpServerConfig:
    return McpServerConfig.model_validate(
        {"project_id": "p", "user_id": "u", "transport": transport, "host": host}
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_may_serve_http_without_a_token(host: str) -> None:
    check_http_auth(_config(host=host), None)
    check_http_auth(_config(host=host), TOKEN)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.20", "memory.example.com"])
def test_any_other_host_needs_a_token(host: str) -> None:
    with pytest.raises(ConfigError, match="set MONGOMEM_MCP_AUTH_TOKEN") as caught:
        check_http_auth(_config(host=host), None)
    assert "\n" not in str(caught.value)
    check_http_auth(_config(host=host), TOKEN)


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_token_is_refused_rather_than_matching_an_empty_header(token: str) -> None:
    with pytest.raises(ConfigError, match="MONGOMEM_MCP_AUTH_TOKEN is set but empty"):
        check_http_auth(_config(), SecretStr(token))


def test_stdio_needs_no_token_on_any_host() -> None:
    check_http_auth(_config(transport="stdio", host="0.0.0.0"), None)
    check_http_auth(_config(transport="stdio"), SecretStr(""))
