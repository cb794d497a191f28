""":class:`HttpSpaces`: memory spaces through the memory service, with the calls and the
results of :class:`~mongomem.spaces.AsyncSpaces`, so code can switch between them.

::

    async with HttpSpaces("http://memory:8080", api_key=key) as spaces:
        hits = await spaces.recall("refunds", {"question": "blender broke"})

The project is the API key's: there is no ``project_id`` argument. Routes and
the JSON form are in :mod:`mongomem.service.spaces_routes` and
:mod:`mongomem.spaces.wire`. Errors are the same :mod:`mongomem.errors`
classes as the direct call (:mod:`mongomem.sdk.errormap`): a space that is not
there is the same :class:`~mongomem.errors.InputError` (``field="space_id"``),
and a key change without ``confirm=True`` returns the same unapplied
:class:`~mongomem.spaces.SpaceUpdate`. A service that cannot be reached or
does not answer in time raises :class:`~mongomem.errors.StorageError`
(retriable); one whose certificate does not verify (see ``verify``),
:class:`~mongomem.errors.ConfigError`. Nothing is retried here: adds are not
idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from mongomem.errors import InputError
from mongomem.sdk.service_client import ServiceClient
from mongomem.spaces.catalog import KeysArg
from mongomem.spaces.dedupe import OnDuplicate
from mongomem.spaces.models import (
    AddResult,
    EscalationDecision,
    FeedbackView,
    PlaygroundResult,
    RecallHit,
    RecallSettings,
    RekeyResult,
    SearchKey,
    Sentiment,
    Space,
    SpaceItem,
    SpaceKind,
    SpaceUpdate,
)
from mongomem.spaces.wire import encode_choice, encode_inputs
from mongomem.tls import Verify

__all__ = ["HttpSpaces"]


_SPACES = TypeAdapter(list[Space])
_ITEMS = TypeAdapter(list[SpaceItem])
_HITS = TypeAdapter(list[RecallHit])
_VIEWS = TypeAdapter(list[FeedbackView])
_UNSET: Any = object()


def _plain(value: Any) -> Any:
    """Models (keys, recall settings) as JSON values; anything else unchanged."""
    if isinstance(value, RecallSettings | SearchKey):
        return value.model_dump()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class HttpSpaces(ServiceClient):
    """The spaces of the API key's project, through the memory service at ``base_url``.

    ``verify`` decides which certificates an ``https://`` service may present
    (:data:`mongomem.tls.Verify`: default the system's CAs; the path of a private CA's
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

    # -- plumbing -----------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        return await self._request(
            method, f"/v1/spaces{path}", json=body, params=params, content=content
        )

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    params: dict[str, str] | None = None) -> Any:  # fmt: skip
        response = await self._send(method, path, body=body, params=params)
        return self._result(response)

    def _result(self, response: httpx.Response) -> Any:
        payload = self._payload(response)
        if response.status_code in (200, 201) and isinstance(payload, dict) and "result" in payload:
            return payload["result"]
        raise self._error(response, payload)

    @staticmethod
    def _id(value: Any, field: str) -> str:
        """A path segment, quoted: it can never change the route (the service checks it)."""
        if not isinstance(value, str) or value.strip(".") == "":
            raise InputError(f"{field} must be an identifier", field=field)
        return quote(value, safe="")

    def _space(self, space_id: str) -> str:
        return "/" + self._id(space_id, "space_id")

    def _item(self, space_id: str, item_id: str) -> str:
        return f"{self._space(space_id)}/items/{self._id(item_id, 'item_id')}"

    async def __aenter__(self) -> HttpSpaces:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- spaces -------------------------------------------------------------

    async def create_space(
        self,
        space_id: str,
        *,
        keys: KeysArg,
        name: str | None = None,
        description: str = "",
        kind: SpaceKind = "episodic",
        recall: RecallSettings | Mapping[str, Any] | None = None,
        encrypted: bool = False,
    ) -> Space:
        body = {"space_id": space_id, "keys": _plain(keys), "name": name,
                "description": description, "kind": kind, "recall": _plain(recall),
                "encrypted": encrypted}  # fmt: skip
        return self._decode(TypeAdapter(Space), await self._call("POST", "", body))

    async def get_space(self, space_id: str) -> Space:
        return self._decode(TypeAdapter(Space), await self._call("GET", self._space(space_id)))

    async def list_spaces(self) -> list[Space]:
        return self._decode(_SPACES, await self._call("GET", ""))

    async def update_space(
        self,
        space_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        recall: RecallSettings | Mapping[str, Any] | None = None,
        keys: KeysArg | None = None,
        encrypted: bool | None = None,
        confirm: bool = False,
    ) -> SpaceUpdate:
        body = {"name": name, "description": description, "recall": _plain(recall),
                "keys": _plain(keys), "encrypted": encrypted, "confirm": confirm}  # fmt: skip
        response = await self._send("PATCH", self._space(space_id), body=body)
        payload = self._payload(response)
        if response.status_code == 409 and isinstance(payload, dict) and "result" in payload:
            return self._decode(TypeAdapter(SpaceUpdate), payload["result"])  # not applied
        return self._decode(TypeAdapter(SpaceUpdate), self._result(response))

    async def delete_space(self, space_id: str) -> int:
        return self._decode(TypeAdapter(int), await self._call("DELETE", self._space(space_id)))

    async def attach_agent(
        self, space_id: str, agent_id: str, *, keys: KeysArg | None = None
    ) -> Space:
        body = {"agent_id": agent_id, "keys": _plain(keys)}
        result = await self._call("POST", f"{self._space(space_id)}/agents", body)
        return self._decode(TypeAdapter(Space), result)

    async def detach_agent(self, space_id: str, agent_id: str) -> Space:
        path = f"{self._space(space_id)}/agents/{self._id(agent_id, 'agent_id')}"
        return self._decode(TypeAdapter(Space), await self._call("DELETE", path))

    # -- items --------------------------------------------------------------

    async def _lookup(self, what: str, space_id: str, inputs: Mapping[str, Any],
                      agent_id: str | None) -> Any:  # fmt: skip
        if not isinstance(inputs, Mapping):
            raise InputError("inputs must be a non-empty mapping of argument → value",
                             field="inputs")  # fmt: skip
        body = {"inputs": encode_inputs(inputs), "agent_id": agent_id}
        return await self._call("POST", f"{self._space(space_id)}/{what}", body)

    async def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        return self._decode(_HITS, await self._lookup("recall", space_id, inputs, agent_id))

    async def find_duplicates(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        return self._decode(_HITS, await self._lookup("duplicates", space_id, inputs, agent_id))

    async def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult:
        result = await self._lookup("playground", space_id, inputs, agent_id)
        return self._decode(TypeAdapter(PlaygroundResult), result)

    async def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision:
        result = await self._lookup("escalations/check", space_id, inputs, agent_id)
        return self._decode(TypeAdapter(EscalationDecision), result)

    @staticmethod
    def _inputs(inputs: Any) -> Any:
        return encode_inputs(inputs) if isinstance(inputs, Mapping) else inputs

    async def add_item(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        outcome: str | None = None,
        comment: str = "",
        sentiment: Sentiment = "neutral",
        agent_id: str | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> AddResult:
        body = {"inputs": self._inputs(inputs), "outputs": outputs, "outcome": outcome,
                "comment": comment, "sentiment": sentiment, "agent_id": agent_id,
                "on_duplicate": encode_choice(on_duplicate)}  # fmt: skip
        result = await self._call("POST", f"{self._space(space_id)}/items", body)
        return self._decode(TypeAdapter(AddResult), result)

    async def promote_feedback(
        self,
        space_id: str,
        *,
        trace_id: str,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        comment: str,
        sentiment: Sentiment,
        part: str | None = None,
        outcome: str | None = None,
        agent_id: str | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> AddResult:
        body = {"trace_id": trace_id, "inputs": self._inputs(inputs), "outputs": outputs,
                "comment": comment, "sentiment": sentiment, "part": part, "outcome": outcome,
                "agent_id": agent_id, "on_duplicate": encode_choice(on_duplicate)}  # fmt: skip
        result = await self._call("POST", f"{self._space(space_id)}/promote", body)
        return self._decode(TypeAdapter(AddResult), result)

    async def resolve_escalation(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        resolution: str,
        outcome: str,
        agent_id: str | None = None,
        resolved_by: str | None = None,
    ) -> SpaceItem:
        body = {"inputs": self._inputs(inputs), "resolution": resolution, "outcome": outcome,
                "agent_id": agent_id, "resolved_by": resolved_by}  # fmt: skip
        result = await self._call("POST", f"{self._space(space_id)}/escalations", body)
        return self._decode(TypeAdapter(SpaceItem), result)

    async def list_items(self, space_id: str) -> list[SpaceItem]:
        return self._decode(_ITEMS, await self._call("GET", f"{self._space(space_id)}/items"))

    async def get_item(self, space_id: str, item_id: str) -> SpaceItem:
        result = await self._call("GET", self._item(space_id, item_id))
        return self._decode(TypeAdapter(SpaceItem), result)

    async def update_item(
        self,
        space_id: str,
        item_id: str,
        *,
        outputs: Mapping[str, Any] | None = None,
        outcome: str | None = _UNSET,
        inputs: Any = _UNSET,
    ) -> SpaceItem:
        body: dict[str, Any] = {"outputs": outputs}
        if outcome is not _UNSET:
            body["outcome"] = outcome
        if inputs is not _UNSET:
            body["inputs"] = self._inputs(inputs)
        result = await self._call("PATCH", self._item(space_id, item_id), body)
        return self._decode(TypeAdapter(SpaceItem), result)

    async def add_feedback(
        self,
        space_id: str,
        item_id: str,
        *,
        comment: str,
        sentiment: Sentiment,
        by: str | None = None,
    ) -> SpaceItem:
        body = {"comment": comment, "sentiment": sentiment, "by": by}
        result = await self._call("POST", f"{self._item(space_id, item_id)}/feedback", body)
        return self._decode(TypeAdapter(SpaceItem), result)

    async def delete_item(self, space_id: str, item_id: str) -> bool:
        """``False`` when there was no such item (the service answers 404), as in process."""
        try:
            result = await self._call("DELETE", self._item(space_id, item_id))
        except InputError as exc:
            if exc.field == "item_id":
                return False
            raise
        return self._decode(TypeAdapter(bool), result)

    async def feedback(self, space_id: str, *, item_id: str | None = None) -> list[FeedbackView]:
        params = None if item_id is None else {"item_id": item_id}
        result = await self._call("GET", f"{self._space(space_id)}/feedback", params=params)
        return self._decode(_VIEWS, result)

    # -- export, import -----------------------------------------------------

    async def export_space(self, space_id: str) -> list[str]:
        """The space and all of its items as JSON lines (header first)."""
        response = await self._send("GET", f"{self._space(space_id)}/export")
        if response.status_code != 200:
            raise self._error(response, self._payload(response))
        return response.text.splitlines()

    async def import_space(
        self,
        lines: Iterable[str],
        *,
        space_id: str | None = None,
        encrypted: bool | None = None,
        reembed: Literal["auto", "always"] = "auto",
    ) -> Space:
        """A new space of the key's project from an export (sent as NDJSON)."""
        texts = [t for t in lines if t.strip()]
        if any("\n" in t or "\r" in t for t in texts):
            raise InputError("an export line must not contain a line break", field="lines")
        params: dict[str, str] = {"reembed": reembed}
        if space_id is not None:
            params["space_id"] = space_id
        if encrypted is not None:
            params["encrypted"] = "true" if encrypted else "false"
        content = "".join(t + "\n" for t in texts).encode()
        response = await self._send("POST", "/import", params=params, content=content)
        return self._decode(TypeAdapter(Space), self._result(response))

    # -- encryption key -----------------------------------------------------

    async def rekey_space(self, space_id: str) -> RekeyResult:
        """Re-seal the space's items under the service's current encryption key."""
        result = await self._call("POST", f"{self._space(space_id)}/rekey")
        return self._decode(TypeAdapter(RekeyResult), result)
