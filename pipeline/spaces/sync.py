""":class:`Spaces`: memory spaces for plain (non-async) code.

The same calls, arguments and results as :class:`~mongomem.spaces.AsyncSpaces`,
blocking. Over HTTP (``base_url=`` and ``api_key=``; the key decides the
project; ``verify=`` for an ``https://`` service, see :mod:`mongomem.tls`) it
wraps an :class:`~mongomem.spaces.http.HttpSpaces`; otherwise
(``project_id=`` and ``settings=``) an :class:`~mongomem.spaces.AsyncSpaces` on
MongoDB. Like the sync SDK (:mod:`mongomem.sdk.sync`) it runs the async client
on a private event loop in a daemon thread (:class:`~mongomem.sdk.sync.LoopThread`),
so it works from any thread; close it (or use it as a context manager) to stop
the thread. ``timeout_s`` bounds every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar

from mongomem.embeddings import Embedder
from mongomem.errors import ConfigError
from mongomem.sdk.sync import SyncClient
from mongomem.settings import Settings, load_settings, with_local_pipeline
from mongomem.spaces.api import AsyncSpaces
from mongomem.spaces.catalog import KeysArg
from mongomem.spaces.crypto import SpacesSettings
from mongomem.spaces.dedupe import OnDuplicate
from mongomem.spaces.http import HttpSpaces
from mongomem.spaces.models import (
    AddResult,
    EscalationDecision,
    FeedbackView,
    PlaygroundResult,
    RecallHit,
    RecallSettings,
    RekeyResult,
    Sentiment,
    Space,
    SpaceItem,
    SpaceKind,
    SpaceUpdate,
)
from mongomem.tls import Verify

__all__ = ["Spaces"]

T = TypeVar("T")
_UNSET: Any = object()


class Spaces(SyncClient["AsyncSpaces | HttpSpaces"]):
    """Memory spaces of one project, for synchronous code (see the module docstring)."""

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
    ) -> None:
        if base_url is None and verify is not True:
            raise ConfigError(
                "verify goes with base_url: it checks the memory service's certificate"
            )
        if base_url is not None:
            if project_id is not None or settings is not None or embedder is not None:
                raise ConfigError(
                    "over HTTP the API key decides the project: give base_url and api_key only"
                )
            if api_key is None:
                raise ConfigError("Spaces over HTTP needs api_key")
        elif project_id is None:
            raise ConfigError("give project_id (MongoDB directly) or base_url and api_key")

        async def make() -> AsyncSpaces | HttpSpaces:
            if base_url is not None and api_key is not None:
                return HttpSpaces(base_url, api_key, verify=verify)
            assert project_id is not None
            return AsyncSpaces(
                settings or with_local_pipeline(load_settings()),
                project_id=project_id,
                embedder=embedder,
                spaces_settings=spaces_settings,
            )

        super().__init__(make, timeout_s, "mongomem-spaces")

    @property
    def inner(self) -> AsyncSpaces | HttpSpaces:
        """The async client every call runs on (on this object's own loop)."""
        return self._async

    # -- spaces -------------------------------------------------------------

    def create_space(
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
        return self._call(self._async.create_space(
            space_id, keys=keys, name=name, description=description, kind=kind, recall=recall,
            encrypted=encrypted,
        ))  # fmt: skip

    def get_space(self, space_id: str) -> Space:
        return self._call(self._async.get_space(space_id))

    def list_spaces(self) -> list[Space]:
        return self._call(self._async.list_spaces())

    def update_space(
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
        return self._call(self._async.update_space(
            space_id, name=name, description=description, recall=recall, keys=keys,
            encrypted=encrypted, confirm=confirm,
        ))  # fmt: skip

    def delete_space(self, space_id: str) -> int:
        return self._call(self._async.delete_space(space_id))

    def attach_agent(self, space_id: str, agent_id: str, *, keys: KeysArg | None = None) -> Space:
        return self._call(self._async.attach_agent(space_id, agent_id, keys=keys))

    def detach_agent(self, space_id: str, agent_id: str) -> Space:
        return self._call(self._async.detach_agent(space_id, agent_id))

    # -- items --------------------------------------------------------------

    def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        return self._call(self._async.recall(space_id, inputs, agent_id=agent_id))

    def find_duplicates(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        return self._call(self._async.find_duplicates(space_id, inputs, agent_id=agent_id))

    def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult:
        return self._call(self._async.playground(space_id, inputs, agent_id=agent_id))

    def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision:
        return self._call(self._async.check_escalation(space_id, inputs, agent_id=agent_id))

    def add_item(
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
        return self._call(self._async.add_item(
            space_id, inputs=inputs, outputs=outputs, outcome=outcome, comment=comment,
            sentiment=sentiment, agent_id=agent_id, on_duplicate=on_duplicate,
        ))  # fmt: skip

    def promote_feedback(
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
        return self._call(self._async.promote_feedback(
            space_id, trace_id=trace_id, inputs=inputs, outputs=outputs, comment=comment,
            sentiment=sentiment, part=part, outcome=outcome, agent_id=agent_id,
            on_duplicate=on_duplicate,
        ))  # fmt: skip

    def resolve_escalation(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        resolution: str,
        outcome: str,
        agent_id: str | None = None,
        resolved_by: str | None = None,
    ) -> SpaceItem:
        return self._call(self._async.resolve_escalation(
            space_id, inputs=inputs, resolution=resolution, outcome=outcome, agent_id=agent_id,
            resolved_by=resolved_by,
        ))  # fmt: skip

    def list_items(self, space_id: str) -> list[SpaceItem]:
        return self._call(self._async.list_items(space_id))

    def get_item(self, space_id: str, item_id: str) -> SpaceItem:
        return self._call(self._async.get_item(space_id, item_id))

    def update_item(
        self,
        space_id: str,
        item_id: str,
        *,
        outputs: Mapping[str, Any] | None = None,
        outcome: str | None = _UNSET,
        inputs: Any = _UNSET,
    ) -> SpaceItem:
        given: dict[str, Any] = {}
        if outcome is not _UNSET:
            given["outcome"] = outcome
        if inputs is not _UNSET:
            given["inputs"] = inputs
        return self._call(self._async.update_item(space_id, item_id, outputs=outputs, **given))

    def add_feedback(
        self, space_id: str, item_id: str, *, comment: str, sentiment: Sentiment,
        by: str | None = None,
    ) -> SpaceItem:  # fmt: skip
        return self._call(self._async.add_feedback(
            space_id, item_id, comment=comment, sentiment=sentiment, by=by
        ))  # fmt: skip

    def delete_item(self, space_id: str, item_id: str) -> bool:
        return self._call(self._async.delete_item(space_id, item_id))

    def feedback(self, space_id: str, *, item_id: str | None = None) -> list[FeedbackView]:
        return self._call(self._async.feedback(space_id, item_id=item_id))

    # -- export, import -----------------------------------------------------

    def export_space(self, space_id: str) -> list[str]:
        return self._call(self._async.export_space(space_id))

    def import_space(
        self,
        lines: Iterable[str],
        *,
        space_id: str | None = None,
        encrypted: bool | None = None,
        reembed: Literal["auto", "always"] = "auto",
    ) -> Space:
        return self._call(self._async.import_space(
            list(lines), space_id=space_id, encrypted=encrypted, reembed=reembed
        ))  # fmt: skip

    # -- encryption key -----------------------------------------------------

    def rekey_space(self, space_id: str) -> RekeyResult:
        return self._call(self._async.rekey_space(space_id))
