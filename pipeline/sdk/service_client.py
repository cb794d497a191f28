"""What every client of the memory service shares: one ``httpx`` client and its errors.

:class:`~mongomem.sdk.HttpTransport` (memory) and :class:`~mongomem.sdk.spaces.HttpSpaces`
(spaces) build on :class:`ServiceClient`. A request that gets no answer raises
:class:`~mongomem.errors.StorageError` (retriable: from the client's side the
service *is* the storage); an ``https://`` service whose certificate does not
verify raises :class:`~mongomem.errors.ConfigError`, as trying again cannot
help. An answer that is an error becomes the same :mod:`mongomem.errors` class
as the direct call (:func:`mongomem.sdk.errormap.error_from`), with the
``Retry-After`` of a 429 or 503 when the body does not say.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from mongomem.adapters.tls import Verify, certificate_problem, client_verify
from mongomem.errors import ConfigError, MongomemError, StorageError
from mongomem.sdk.errormap import error_from

__all__ = ["ServiceClient"]

T = TypeVar("T")


class ServiceClient:
    """The memory service at ``base_url``, called with ``api_key`` (see the module docstring).

    ``verify`` decides which certificates an ``https://`` service may present
    (:data:`mongomem.adapters.tls.Verify`). ``client`` lets an application share (or a
    test fake) its :class:`httpx.AsyncClient`, whose own ``verify`` then
    applies; a client made here is closed by :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float,
        client: httpx.AsyncClient | None,
        verify: Verify,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"the memory service URL must be http(s)://…, got {base_url!r}")
        if client is not None and verify is not True:
            raise ConfigError("pass client or verify, not both: the client verifies as it was made")
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self._timeout = timeout_s
        self._verify = client_verify(verify)
        self._client = client
        self._own_client = client is None

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.base_url!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, verify=self._verify)
        return self._client

    async def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        """``method`` ``base_url + path`` with the API key; no answer is an error here."""
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        headers.update(options.pop("headers", {}))
        try:
            return await self._http().request(
                method, f"{self.base_url}{path}", headers=headers, **options
            )
        except httpx.TimeoutException as exc:
            raise StorageError(f"the memory service at {self.base_url} timed out") from exc
        except httpx.HTTPError as exc:
            if problem := certificate_problem(exc):
                raise ConfigError(
                    f"the memory service at {self.base_url} is not trusted ({problem}): "
                    "pass verify= the CA bundle that signed its certificate"
                ) from exc
            raise StorageError(
                f"the memory service at {self.base_url} is unreachable: {exc}"
            ) from exc

    @staticmethod
    def _payload(response: httpx.Response) -> Any:
        """The answer's JSON, or ``None`` when it has none."""
        try:
            return response.json()
        except ValueError:
            return None

    @staticmethod
    def _error(response: httpx.Response, payload: Any) -> MongomemError:
        """The error an answer stands for (its status, body and ``Retry-After``)."""
        return error_from(response.status_code, payload, retry_after=_retry_after(response))

    @staticmethod
    def _decode(adapter: TypeAdapter[T], value: Any) -> T:
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            raise MongomemError(f"the memory service answered something unexpected: {exc}") from exc

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.aclose()
            self._client = None


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds, if the answer has one in that form."""
    try:
        seconds = float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None
