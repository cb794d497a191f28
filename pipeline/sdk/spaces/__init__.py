"""The spaces clients of the SDK (SPEC H): the API as :class:`SpacesTransport`, over HTTP
as :class:`HttpSpaces`, blocking as :class:`Spaces`.

:class:`~mongomem.spaces.AsyncSpaces` (the domain, on MongoDB) is the direct
transport. The HTTP form of every call is one entry of
:data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS`, from which :class:`HttpSpaces`,
the service's routes and the MCP space tools are derived.
"""

from __future__ import annotations

from mongomem.sdk.spaces.http import HttpSpaces
from mongomem.sdk.spaces.sync import Spaces
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.spaces.wire import SPACE_OPERATIONS, SpaceOperation

__all__ = ["SPACE_OPERATIONS", "HttpSpaces", "SpaceOperation", "Spaces", "SpacesTransport"]
