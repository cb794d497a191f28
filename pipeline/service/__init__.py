"""The standalone memory service over HTTP, with API keys (SPEC G2).

::

    MONGOMEM_SERVICE_API_KEYS="travel-agent:<a long random key>" mongomem serve

    memory = Memory(project_id="travel-agent", api_key=key, base_url="http://127.0.0.1:8080")

:func:`make_app` is the aiohttp application, :func:`serve` runs it until an
event is set, :mod:`pipeline.service.keys` decides which project a key opens
(each key opens exactly one), and :func:`add_cli` hangs ``serve`` and
``keys`` under the ``mongomem`` command. The SDK's side is
:class:`~pipeline.sdk.HttpTransport`.
"""

from __future__ import annotations

from pipeline.service.app import REQUEST_SECONDS, REQUESTS, identity_of, make_app, serve
from pipeline.service.cli import add_cli, keys_command, main, serve_command
from pipeline.service.keys import (
    API_KEYS,
    KEY_PREFIX,
    ApiKeyInfo,
    ApiKeyStore,
    EnvKey,
    KeyRing,
    hash_key,
    parse_env_keys,
)

__all__ = [
    "API_KEYS",
    "KEY_PREFIX",
    "REQUESTS",
    "REQUEST_SECONDS",
    "ApiKeyInfo",
    "ApiKeyStore",
    "EnvKey",
    "KeyRing",
    "add_cli",
    "hash_key",
    "identity_of",
    "keys_command",
    "main",
    "make_app",
    "parse_env_keys",
    "serve",
    "serve_command",
]
