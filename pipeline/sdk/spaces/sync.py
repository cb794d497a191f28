""":class:`Spaces`: memory spaces for plain (non-async) code.

The same calls, arguments and results as :class:`~mongomem.sdk.spaces.SpacesTransport`
(:class:`~mongomem.spaces.AsyncSpaces`), blocking: each call is derived from the
protocol, run on the async client (:mod:`mongomem.sdk.spaces.blocking`, typed by
its generated stub). Over HTTP (``base_url=`` and ``api_key=``; the
key decides the project; ``verify=`` for an ``https://`` service, see
:mod:`mongomem.adapters.tls`) it wraps an :class:`~mongomem.sdk.spaces.HttpSpaces`;
otherwise (``project_id=`` and ``settings=``) an :class:`~mongomem.spaces.AsyncSpaces`
on MongoDB; ``transport=`` wraps any other :class:`SpacesTransport`. Like the sync
SDK (:mod:`mongomem.sdk.sync`) it runs the async client on a private event loop
in a daemon thread (:class:`~mongomem.sdk.sync.LoopThread`), so it works from any
thread; close it (or use it as a context manager) to stop the thread.
``timeout_s`` bounds every call.
"""

from __future__ import annotations

from mongomem.adapters.embeddings import Embedder
from mongomem.adapters.tls import Verify
from mongomem.errors import ConfigError
from mongomem.sdk.spaces.blocking import SpaceCalls
from mongomem.sdk.spaces.http import HttpSpaces
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.sync import SyncClient
from mongomem.settings import Settings, resolve_settings
from mongomem.spaces.api import AsyncSpaces
from mongomem.spaces.crypto import SpacesSettings

__all__ = ["Spaces"]


class Spaces(SyncClient[SpacesTransport], SpaceCalls):
    """Memory spaces of one project, for synchronous code (see the module docstring); the
    calls are :class:`~mongomem.sdk.spaces.blocking.SpaceCalls`."""

    def __init__(
        self,
        *,
        project_id: str | None = None,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        spaces_settings: SpacesSettings | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        verify: Verify = True,
        timeout_s: float | None = 120.0,
        transport: SpacesTransport | None = None,
    ) -> None:
        if base_url is None and verify is not True:
            raise ConfigError(
                "verify goes with base_url: it checks the memory service's certificate"
            )
        direct = (project_id, settings, embedder, spaces_settings)
        if transport is not None:
            if base_url is not None or api_key is not None or any(v is not None for v in direct):
                raise ConfigError("transport= is the whole client: give no other arguments")
        elif base_url is not None:
            if project_id is not None or settings is not None or embedder is not None:
                raise ConfigError(
                    "over HTTP the API key decides the project: give base_url and api_key only"
                )
            if api_key is None:
                raise ConfigError("Spaces over HTTP needs api_key")
        elif project_id is None:
            raise ConfigError("give project_id (MongoDB directly) or base_url and api_key")

        async def make() -> SpacesTransport:
            if transport is not None:
                return transport
            if base_url is not None and api_key is not None:
                return HttpSpaces(base_url, api_key, verify=verify)
            assert project_id is not None
            return AsyncSpaces(
                settings or resolve_settings(),
                project_id=project_id,
                embedder=embedder,
                spaces_settings=spaces_settings,
            )

        super().__init__(make, timeout_s, "mongomem-spaces")

    @property
    def inner(self) -> SpacesTransport:
        """The async client every call runs on (on this object's own loop)."""
        return self._async
