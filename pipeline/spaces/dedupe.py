"""What to do when a new item has near-duplicates (SPEC H4): the caller's choice.

Before an item is stored, the space is searched with its own keys and its
``duplicate_threshold``. When something is found and the caller gave no
choice, nothing is stored and the duplicates are returned. The choices:

* :class:`AddAnyway` — store the new item next to them.
* :class:`Replace` — store the new item, then delete the chosen items (in that
  order, so a failure never loses both).
* :class:`Merge` — keep the closest duplicate, append the new feedback to it.
  When the two sentiments differ the caller must say which wins
  (``sentiment_wins``); otherwise the merge is refused with an
  :class:`~mongomem.errors.InputError`.

:func:`merge_into` is the pure merge.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mongomem.errors import InputError
from mongomem.spaces.models import SpaceItem

__all__ = ["AddAnyway", "Merge", "OnDuplicate", "Replace", "merge_into"]


class _Choice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AddAnyway(_Choice):
    """Store the new item even though near-duplicates exist."""


class Replace(_Choice):
    """Delete these existing items (of the same space) and store the new one."""

    item_ids: tuple[str, ...] = Field(min_length=1, max_length=100)


class Merge(_Choice):
    """Merge the new feedback into the closest duplicate."""

    sentiment_wins: Literal["existing", "new"] | None = None


OnDuplicate = AddAnyway | Replace | Merge


def merge_into(
    existing: SpaceItem,
    new: SpaceItem,
    *,
    sentiment_wins: Literal["existing", "new"] | None,
    now: datetime,
) -> SpaceItem:
    """``existing`` with ``new``'s feedback appended; the sentiment is the winner's.

    Inputs, outputs and outcome of ``existing`` are kept.
    """
    sentiment = existing.sentiment
    if new.sentiment != existing.sentiment:
        if sentiment_wins is None:
            raise InputError(
                f"the sentiments differ (existing: {existing.sentiment}, new: {new.sentiment}): "
                "say which wins with Merge(sentiment_wins='existing' or 'new')",
                field="on_duplicate.sentiment_wins",
            )
        sentiment = new.sentiment if sentiment_wins == "new" else existing.sentiment
    return existing.model_copy(
        update={
            "feedback": existing.feedback + new.feedback,
            "sentiment": sentiment,
            "updated_at": now,
        }
    )
