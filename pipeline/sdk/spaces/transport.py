""":class:`SpacesTransport`: every call of memory spaces, written once (SPEC H).

This protocol is the spaces API. :class:`~mongomem.spaces.AsyncSpaces` fills it
directly on MongoDB; :class:`~mongomem.sdk.spaces.HttpSpaces` fills it through
the memory service, each call derived from its entry in
:data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS`; the blocking
:class:`~mongomem.sdk.spaces.Spaces` runs any of them on its own loop; the
service's routes and the MCP server's space tools are derived from the same
table. A class that names this protocol as a base and does not derive a call
raises :class:`NotImplementedError` for it (a unit test checks that none is left).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NoReturn, Protocol

from mongomem.spaces.catalog import KeysArg
from mongomem.spaces.dedupe import OnDuplicate
from mongomem.spaces.editing import UNSET
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

__all__ = ["SpacesTransport"]


def _not_derived() -> NoReturn:
    raise NotImplementedError("this spaces client does not implement the call")


class SpacesTransport(Protocol):
    """The spaces of one project (the API key's, over HTTP). Every call validates all of
    its input before it writes anything; errors are :mod:`mongomem.errors` classes, the
    same whichever transport answers."""

    # -- spaces (SPEC H1) ---------------------------------------------------

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
        """A new space. ``encrypted`` is fixed now: it can never be changed."""
        _not_derived()

    async def get_space(self, space_id: str) -> Space:
        """One space, with its current item count."""
        _not_derived()

    async def list_spaces(self, *, limit: int | None = None, offset: int = 0) -> list[Space]:
        """The project's spaces by id, with their item counts: ``limit`` of them from the
        ``offset``-th (a page; every space without ``limit``)."""
        _not_derived()

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
        """Edit a space. A change of its keys is applied only with ``confirm=True``;
        without it nothing is changed and the warning lists the agents affected."""
        _not_derived()

    async def delete_space(self, space_id: str) -> int:
        """Delete a space and all of its items; returns how many items went."""
        _not_derived()

    # -- agents (SPEC H6) ---------------------------------------------------

    async def attach_agent(
        self, space_id: str, agent_id: str, *, keys: KeysArg | None = None
    ) -> Space:
        """Register an agent of the space: it inherits the space's keys, or uses ``keys``."""
        _not_derived()

    async def detach_agent(self, space_id: str, agent_id: str) -> Space:
        """Unregister an agent of the space."""
        _not_derived()

    # -- items --------------------------------------------------------------

    async def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        """The space's best matches for ``inputs`` (threshold, top-k, mode: the space's)."""
        _not_derived()

    async def find_duplicates(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        """Items at least ``duplicate_threshold`` similar to ``inputs`` (best first)."""
        _not_derived()

    async def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult:
        """What recall would return for ``inputs`` now, and what just missed."""
        _not_derived()

    async def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision:
        """Before raising: apply a stored outcome (``apply``), or raise the escalation."""
        _not_derived()

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
        """Add an episodic item, unless near-duplicates exist and no choice was given."""
        _not_derived()

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
        """Make a user's feedback on a run (``trace_id``), or on one ``part`` of it, an item."""
        _not_derived()

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
        """Store a person's resolution of an escalation as an item of the space."""
        _not_derived()

    async def list_items(self, space_id: str) -> list[SpaceItem]:
        """Every item of the space, oldest first."""
        _not_derived()

    async def get_item(self, space_id: str, item_id: str) -> SpaceItem:
        """One item (an :class:`~mongomem.errors.InputError` naming ``item_id`` if none)."""
        _not_derived()

    async def update_item(
        self,
        space_id: str,
        item_id: str,
        *,
        outputs: Mapping[str, Any] | None = None,
        outcome: str | None = UNSET,
        inputs: Any = UNSET,
    ) -> SpaceItem:
        """Change an item's outputs or outcome. Its inputs cannot be changed (SPEC H10)."""
        _not_derived()

    async def add_feedback(
        self,
        space_id: str,
        item_id: str,
        *,
        comment: str,
        sentiment: Sentiment,
        by: str | None = None,
    ) -> SpaceItem:
        """Append feedback; the item's sentiment becomes the newest feedback's."""
        _not_derived()

    async def delete_item(self, space_id: str, item_id: str) -> bool:
        """Delete one item; ``False`` when there was no such item."""
        _not_derived()

    async def feedback(self, space_id: str, *, item_id: str | None = None) -> list[FeedbackView]:
        """The feedback of the last 30 days (of one item, or the whole space), newest first."""
        _not_derived()

    # -- export, import (SPEC H9) -------------------------------------------

    async def export_space(self, space_id: str) -> list[str]:
        """The space and all of its items as JSON lines (header first)."""
        _not_derived()

    async def import_space(
        self,
        lines: Iterable[str],
        *,
        space_id: str | None = None,
        encrypted: bool | None = None,
        reembed: Literal["auto", "always"] = "auto",
    ) -> Space:
        """A new space of the project from an export."""
        _not_derived()

    # -- encryption key -----------------------------------------------------

    async def rekey_space(self, space_id: str) -> RekeyResult:
        """Re-seal the space's items under the current encryption key."""
        _not_derived()

    async def close(self) -> None:
        """Release what the client holds (connections); it is not used afterwards."""
        _not_derived()
