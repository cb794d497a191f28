"""The streamable-HTTP transport: a bearer token in front of the SDK's app.

The server acts for the one caller fixed at launch (see
:mod:`mongomem.mcp_server`), so whoever can reach the endpoint *is* that caller.
With ``MONGOMEM_MCP_AUTH_TOKEN`` set, every HTTP request must carry
``Authorization: Bearer <token>``; any other request is answered ``401`` with
``WWW-Authenticate: Bearer`` and the memory service's JSON error body
(:mod:`mongomem.sdk.errormap`) before it reaches the MCP SDK. The token is
compared in constant time and never logged.

Without a token the endpoint is open, so it may only listen on loopback
(``127.0.0.1``, ``::1``, ``localhost``: the hosts for which the SDK also turns
on its DNS-rebinding protection); anything else is a
:class:`~mongomem.errors.ConfigError` before the server starts. Other local
processes can still reach a loopback endpoint: set a token on shared machines.

With ``MONGOMEM_MCP_TLS_CERT_FILE`` and ``…_KEY_FILE`` the endpoint is
``https://…/mcp`` (TLS 1.2 at least; :mod:`mongomem.adapters.tls`), so the token does not
cross the network in the clear; a certificate or key that cannot be loaded is
a :class:`~mongomem.errors.ConfigError` before the server starts.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from typing import Any

from pydantic import SecretStr

from mongomem.errors import AuthError, ConfigError
from mongomem.extras import require
from mongomem.mcp_server.config import McpServerConfig
from mongomem.sdk.errormap import error_body

with require("mcp"):
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from starlette.datastructures import Headers
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Receive, Scope, Send
    from starlette.websockets import WebSocketClose

__all__ = ["LOOPBACK_HOSTS", "BearerAuth", "check_http_auth", "serve_http"]

logger = logging.getLogger(__name__)

#: Hosts the endpoint may listen on without a token.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def check_http_auth(config: McpServerConfig, token: SecretStr | None) -> None:
    """Refuse to serve streamable HTTP off loopback without a token, or with an empty one."""
    if config.transport != "streamable-http":
        return
    if token is not None and not token.get_secret_value().strip():
        raise ConfigError("MONGOMEM_MCP_AUTH_TOKEN is set but empty")
    if token is None and config.host not in LOOPBACK_HOSTS:
        raise ConfigError(
            f"refusing to serve MCP over HTTP on {config.host!r} without a token: "
            "set MONGOMEM_MCP_AUTH_TOKEN, or listen on 127.0.0.1"
        )


class BearerAuth:
    """ASGI middleware: only requests with ``Authorization: Bearer <token>`` reach ``app``.

    Lifespan events pass through; a WebSocket without the token is closed
    before it is accepted.
    """

    def __init__(self, app: ASGIApp, token: SecretStr) -> None:
        self.app = app
        self._token = token.get_secret_value().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = self._problem(Headers(scope=scope).get("authorization"))
        if problem is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await WebSocketClose(code=1008, reason=problem)(scope, receive, send)
        else:
            body = error_body(AuthError(problem)).model_dump(exclude_none=True)
            response = JSONResponse(
                {"error": body},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="mongomem"'},
            )
            await response(scope, receive, send)

    def _problem(self, authorization: str | None) -> str | None:
        """Why the header is refused, or ``None`` when it carries the token."""
        scheme, _, credentials = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return "missing bearer token (Authorization: Bearer <token>)"
        if not hmac.compare_digest(credentials.strip().encode(), self._token):
            return "wrong bearer token"
        return None


async def serve_http(
    server: MCPServer[Any],
    config: McpServerConfig,
    token: SecretStr | None,
    *,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve ``server`` at ``http(s)://<host>:<port>/mcp`` until stopped (behind
    :class:`BearerAuth` when there is a ``token``; over TLS with ``tls``, see
    :func:`mongomem.adapters.tls.server_context`), as the SDK's own runner does."""
    app: ASGIApp = server.streamable_http_app(host=config.host)
    if token is not None:
        app = BearerAuth(app, token)
    host = f"[{config.host}]" if ":" in config.host else config.host
    where = f"{'http' if tls is None else 'https'}://{host}:{config.port}/mcp"
    encryption = "no TLS" if tls is None else "TLS on"
    if token is not None:
        logger.info("MCP server on %s: bearer-token authentication on, %s", where, encryption)
    else:
        logger.warning(
            "MCP server on %s: no authentication (MONGOMEM_MCP_AUTH_TOKEN unset), %s; "
            "any local process can act as this server's caller",
            where,
            encryption,
        )
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=server.settings.log_level.lower(),
        ssl_context_factory=None if tls is None else lambda _config, _default: tls,
    )
    await uvicorn.Server(uvicorn_config).serve()
