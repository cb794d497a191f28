"""The standalone memory service over HTTP, with API keys (SPEC G2).

::

    MONGOMEM_SERVICE_API_KEYS="travel-agent:<a long random key>" mongomem serve

    memory = Memory(project_id="travel-agent", api_key=key, base_url="http://127.0.0.1:8080")

:func:`make_app` is the ASGI application (FastAPI; its OpenAPI document is at
``/openapi.json``), :func:`serve` runs it on uvicorn until an
event is set, :mod:`mongomem.service.keys` decides which project a key opens
(each key opens exactly one), :mod:`mongomem.service.limits` how often each
key may call, and :func:`add_cli` hangs ``serve`` and ``keys`` under the
``mongomem`` command. The SDK's side is :class:`~mongomem.sdk.HttpTransport`.
Names load on first use, so adding the CLI commands does not import the
server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mongomem.cli.service import add_cli, keys_command, main, serve_command
    from mongomem.service.app import REQUEST_SECONDS, REQUESTS, identity_of, make_app, serve
    from mongomem.service.http import RunningServer, start_server
    from mongomem.service.keys import (
        API_KEYS,
        KEY_PREFIX,
        ApiKeyInfo,
        ApiKeyStore,
        EnvKey,
        KeyRing,
        hash_key,
        parse_env_keys,
    )
    from mongomem.service.limits import Bucket, RateLimiter, take

__all__ = [
    "API_KEYS",
    "KEY_PREFIX",
    "REQUESTS",
    "REQUEST_SECONDS",
    "ApiKeyInfo",
    "ApiKeyStore",
    "Bucket",
    "EnvKey",
    "KeyRing",
    "RateLimiter",
    "RunningServer",
    "add_cli",
    "hash_key",
    "identity_of",
    "keys_command",
    "main",
    "make_app",
    "parse_env_keys",
    "serve",
    "serve_command",
    "start_server",
    "take",
]

_HOME = {
    **dict.fromkeys(["REQUESTS", "REQUEST_SECONDS", "identity_of", "make_app", "serve"], "app"),
    **dict.fromkeys(["RunningServer", "start_server"], "http"),
    **dict.fromkeys(["Bucket", "RateLimiter", "take"], "limits"),
    **dict.fromkeys(["add_cli", "keys_command", "main", "serve_command"], "mongomem.cli.service"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOME.get(name, "keys")
    module = importlib.import_module(home if "." in home else f"{__name__}.{home}")
    return getattr(module, name)
