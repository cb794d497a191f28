"""The blocking calls of memory spaces, derived from :class:`SpacesTransport` at import.

:class:`SpaceCalls` holds one method per entry of
:data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS`: the protocol's call, with its
signature and docstring, run on the client's own loop
(:class:`~mongomem.sdk.sync.SyncClient`). A call is bound to the protocol's
signature on the caller's thread, so a wrong call fails there; an iterable
argument (``import_space``'s lines) is read there too.

Type checkers read ``blocking.pyi`` beside this module, generated from the same
protocol by :func:`mongomem.sdk.spaces.codegen.blocking_stub`
(``python -m mongomem.sdk.spaces.codegen``); a unit test keeps it up to date.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any

from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.spaces.wire import SPACE_OPERATIONS

__all__ = ["SpaceCalls"]


class SpaceCalls:
    """Every spaces call, blocking (a base of :class:`~mongomem.sdk.spaces.Spaces`)."""

    _async: SpacesTransport

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - SyncClient._call comes first


def _blocking(name: str) -> Any:
    """The blocking form of the protocol's call ``name``."""
    signature = inspect.signature(getattr(SpacesTransport, name))
    iterables = [
        p.name for p in signature.parameters.values() if str(p.annotation).startswith("Iterable[")
    ]

    def call(self: SpaceCalls, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)  # a wrong call fails here, not later
        for parameter in iterables:  # a generator is read on the caller's thread
            if parameter in bound.arguments:
                bound.arguments[parameter] = list(bound.arguments[parameter])
        return self._call(getattr(self._async, name)(*bound.args[1:], **bound.kwargs))

    call.__name__ = name
    call.__qualname__ = f"SpaceCalls.{name}"
    call.__doc__ = getattr(SpacesTransport, name).__doc__
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


for _name in SPACE_OPERATIONS:
    setattr(SpaceCalls, _name, _blocking(_name))
