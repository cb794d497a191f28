""":class:`HttpSpaces`: memory spaces through the memory service, with the calls and the
results of :class:`~mongomem.spaces.AsyncSpaces`, so code can switch between them.

::

    async with HttpSpaces("http://memory:8080", api_key=key) as spaces:
        hits = await spaces.recall("refunds", {"question": "blender broke"})

The project is the API key's: there is no ``project_id`` argument. Each call is
derived from its entry in :data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS`
(its signature is :class:`~mongomem.sdk.spaces.SpacesTransport`'s). Errors are
the same :mod:`mongomem.errors` classes as the direct call
(:mod:`mongomem.sdk.errormap`): a space that is not there is the same
:class:`~mongomem.errors.InputError` (``field="space_id"``), and a key change
without ``confirm=True`` returns the same unapplied
:class:`~mongomem.spaces.SpaceUpdate`. A service that cannot be reached or
does not answer in time raises :class:`~mongomem.errors.StorageError`
(retriable); one whose certificate does not verify (see ``verify``),
:class:`~mongomem.errors.ConfigError`. Nothing is retried here: adds are not
idempotent.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from mongomem.adapters.tls import Verify
from mongomem.errors import InputError
from mongomem.sdk.service_client import ServiceClient
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.spaces.wire import (
    SPACE_OPERATIONS,
    SPACES_PREFIX,
    SpaceOperation,
    encode_argument,
)
from mongomem.spaces.editing import UNSET

__all__ = ["HttpSpaces"]


class HttpSpaces(ServiceClient, SpacesTransport):
    """The spaces of the API key's project, through the memory service at ``base_url``.

    ``verify`` decides which certificates an ``https://`` service may present
    (:data:`mongomem.adapters.tls.Verify`: default the system's CAs; the path of a private CA's
    bundle; an :class:`ssl.SSLContext`), as for :class:`~mongomem.sdk.HttpTransport`.
    ``client`` lets an application share (or a test fake) its :class:`httpx.AsyncClient`,
    whose own ``verify`` then applies.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 60.0,
        client: httpx.AsyncClient | None = None,
        verify: Verify = True,
    ) -> None:
        super().__init__(base_url, api_key, timeout_s=timeout_s, client=client, verify=verify)

    async def __aenter__(self) -> HttpSpaces:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await ServiceClient.close(self)

    async def _invoke(self, op: SpaceOperation, given: dict[str, Any]) -> Any:
        """One call: ``given`` holds the arguments the caller passed, by name."""
        path = SPACES_PREFIX + op.path.format(
            **{name: _segment(given.get(name), name) for name in op.path_fields}
        )
        sent = {
            k: encode_argument(k, v)
            for k, v in given.items()
            if k not in op.path_fields and not (op.lines_body and k == "lines") and v is not UNSET
        }
        for name, value in sent.items():  # name what cannot be sent, as the direct call does
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InputError(f"{name} cannot be sent as JSON: {exc}", field=name) from None
        query = {k: _query_value(v) for k, v in sent.items() if k in op.in_query and v is not None}
        body = {k: v for k, v in sent.items() if k in op.in_body}
        options: dict[str, Any] = {"params": query or None}
        if op.lines_body:
            options["content"] = _ndjson(given.get("lines", ()))
        elif op.in_body:
            options["json"] = body
        response = await self._request(op.method, path, **options)
        if op.lines_answer and response.status_code == 200:
            return response.text.splitlines()
        payload = self._payload(response)
        adapter = _adapter(op.result)
        answered = isinstance(payload, dict) and "result" in payload
        if answered and (
            response.status_code == op.status or (op.confirmable and response.status_code == 409)
        ):
            return self._decode(adapter, payload["result"])
        error = self._error(response, payload)
        if op.missing_is_false and _missing(error, op.path_fields[-1]):
            return False
        raise error


@functools.cache
def _adapter(result: Any) -> TypeAdapter[Any]:
    return TypeAdapter(result)


def _missing(error: Exception, field: str) -> bool:
    """Whether ``error`` says the thing ``field`` names is not there (a 404)."""
    return isinstance(error, InputError) and error.field == field


def _segment(value: Any, field: str) -> str:
    """A path segment, quoted: it can never change the route (the service checks it)."""
    if not isinstance(value, str) or value.strip(".") == "":
        raise InputError(f"{field} must be an identifier", field=field)
    return quote(value, safe="")


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _ndjson(lines: Iterable[str]) -> bytes:
    if isinstance(lines, str | bytes) or not isinstance(lines, Iterable):
        raise InputError("lines must be the export's lines (strings)", field="lines")
    texts = [t for t in lines if not isinstance(t, str) or t.strip()]
    if not all(isinstance(t, str) for t in texts):
        raise InputError("an export line must be a string", field="lines")
    if any("\n" in t or "\r" in t for t in texts):
        raise InputError("an export line must not contain a line break", field="lines")
    return "".join(t + "\n" for t in texts).encode()


def _derive(name: str, op: SpaceOperation) -> Any:
    """The method ``name`` of :class:`HttpSpaces`, with the protocol's signature."""
    signature = inspect.signature(getattr(SpacesTransport, name))

    async def call(self: HttpSpaces, *args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
        given.pop("self")
        return await self._invoke(op, dict(given))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(SpacesTransport, name).__doc__
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


for _name, _op in SPACE_OPERATIONS.items():
    setattr(HttpSpaces, _name, _derive(_name, _op))
