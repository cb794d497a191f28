"""Listing, inspecting, editing and deleting items; feedback (SPEC H1, H10).

Known limits, as SPEC H10 states them:

* An item's **inputs cannot be edited** (its vectors and duplicates were
  computed from them): :meth:`EditCalls.update_item` refuses ``inputs`` with
  :data:`INPUTS_IMMUTABLE`. Delete the item and add it again.
* **Feedback views** (:meth:`EditCalls.feedback`) show the last
  :data:`FEEDBACK_WINDOW`; older feedback is kept on the item (and exported),
  only not shown there.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from mongomem.errors import InputError
from mongomem.spaces.base import SpacesBase, check_outputs, check_sentiment, optional_text
from mongomem.spaces.catalog import check_id, check_text
from mongomem.spaces.models import Feedback, FeedbackView, Sentiment, SpaceItem

__all__ = ["FEEDBACK_WINDOW", "INPUTS_IMMUTABLE", "UNSET", "EditCalls"]

#: How far back feedback views look (SPEC H10).
FEEDBACK_WINDOW = timedelta(days=30)
INPUTS_IMMUTABLE = (
    "an item's inputs cannot be edited: delete the item and add it again with the new inputs"
)
#: The default of an argument left out: the call changes nothing of that field.
UNSET: Any = object()


class EditCalls(SpacesBase):
    """Items one by one: list, get, update, delete, feedback."""

    async def list_items(self, space_id: str) -> list[SpaceItem]:
        """Every item of the space, oldest first."""
        space = await self._space(space_id)
        store, _ = await self._ready()
        return [item for item, _ in await store.find_items(self.project_id, space)]

    async def get_item(self, space_id: str, item_id: str) -> SpaceItem:
        space = await self._space(space_id)
        store, _ = await self._ready()
        found = await store.find_items(self.project_id, space, [check_id(item_id, "item_id")])
        if not found:
            raise InputError(f"no item {item_id!r} in space {space_id!r}", field="item_id")
        return found[0][0]

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
        if inputs is not UNSET:
            raise InputError(INPUTS_IMMUTABLE, field="inputs")
        changes: dict[str, Any] = {}
        if outputs is not None:
            changes["outputs"] = check_outputs(outputs)
        if outcome is not UNSET:
            changes["outcome"] = optional_text(outcome, "outcome")
        return await self._rewrite(space_id, item_id, changes)

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
        text = check_text(comment, "comment", max_chars=20_000)
        mood = check_sentiment(sentiment)
        if by is not None:
            check_id(by, "by")
        item = await self.get_item(space_id, item_id)
        entry = Feedback(comment=text, sentiment=mood, at=self.clock(), by=by)
        return await self._rewrite(
            space_id, item_id, {"feedback": (*item.feedback, entry), "sentiment": mood}
        )

    async def _rewrite(self, space_id: str, item_id: str, changes: dict[str, Any]) -> SpaceItem:
        space = await self._space(space_id)
        store, _ = await self._ready()
        found = await store.find_items(self.project_id, space, [check_id(item_id, "item_id")])
        if not found:
            raise InputError(f"no item {item_id!r} in space {space_id!r}", field="item_id")
        item, vectors = found[0]
        if not changes:
            return item
        updated = item.model_copy(update={**changes, "updated_at": self.clock()})
        await store.replace_item(store.item_document(self.project_id, space, updated, vectors))
        return updated

    async def delete_item(self, space_id: str, item_id: str) -> bool:
        """Delete one item; ``False`` when there was no such item."""
        space = await self._space(space_id)
        store, _ = await self._ready()
        gone = await store.delete_items(
            self.project_id, space.space_id, [check_id(item_id, "item_id")]
        )
        return gone > 0

    async def feedback(self, space_id: str, *, item_id: str | None = None) -> list[FeedbackView]:
        """The feedback of the last 30 days (of one item, or the whole space), newest first."""
        since = self.clock() - FEEDBACK_WINDOW
        items = (
            [await self.get_item(space_id, item_id)]
            if item_id is not None
            else await self.list_items(space_id)
        )
        views = [
            FeedbackView(
                item_id=i.item_id, comment=f.comment, sentiment=f.sentiment, at=f.at, by=f.by
            )
            for i in items
            for f in i.feedback
            if f.at >= since
        ]
        views.sort(key=lambda v: (v.at, v.item_id), reverse=True)
        return views
