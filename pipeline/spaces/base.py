"""What every group of space calls shares: the hooks :class:`~mongomem.spaces.AsyncSpaces`
provides, and the steps that check, build, embed and score items.

Nothing here writes: :meth:`SpacesBase._new_item` validates all input, then
summarises (SPEC H5) and embeds; the caller writes only after it returned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from mongomem.adapters.embeddings import Embedder
from mongomem.errors import InputError, StateConflict
from mongomem.models import MAX_JSON_DEPTH, json_depth
from mongomem.spaces.catalog import check_id, check_text
from mongomem.spaces.crypto import Keyring
from mongomem.spaces.keys import Summariser, check_inputs, derive_key_texts
from mongomem.spaces.matching import Query, build_query, check_embedder, embed_texts, score_all
from mongomem.spaces.models import Feedback, Sentiment, Space, SpaceItem, SpaceKind
from mongomem.spaces.scoring import Scored
from mongomem.spaces.store import SpaceStore, Vectors

__all__ = ["SpacesBase", "check_outputs", "check_sentiment", "optional_text"]


def check_outputs(value: Any) -> dict[str, Any]:
    """A JSON mapping with string keys (``None`` → empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InputError("outputs must be a mapping with string keys", field="outputs")
    if json_depth(value) > MAX_JSON_DEPTH:  # the rule of turn metadata
        raise InputError(f"outputs nest deeper than {MAX_JSON_DEPTH} levels", field="outputs")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"outputs must be JSON: {exc}", field="outputs") from exc
    return dict(value)


def check_sentiment(value: Any, field: str = "sentiment") -> Sentiment:
    if value == "positive":
        return "positive"
    if value == "negative":
        return "negative"
    if value == "neutral":
        return "neutral"
    raise InputError(f"{field} must be 'positive', 'negative' or 'neutral'", field=field)


def optional_text(value: Any, field: str) -> str | None:
    return None if value is None else check_text(value, field, max_chars=20_000)


class SpacesBase:
    """Hooks and shared steps; :class:`~mongomem.spaces.AsyncSpaces` fills in the hooks."""

    project_id: str
    clock: Callable[[], datetime]
    _keys: Keyring

    async def _ready(self) -> tuple[SpaceStore, Embedder]:
        raise NotImplementedError

    async def _space(self, space_id: str) -> Space:
        raise NotImplementedError

    async def _summariser_now(self) -> Summariser:
        raise NotImplementedError

    async def _space_of(self, space_id: str, kind: SpaceKind) -> tuple[Space, SpaceStore]:
        """The space, if it holds ``kind`` items and this process embeds like it did."""
        space = await self._space(space_id)
        if space.kind != kind:
            raise StateConflict(
                f"space {space.space_id!r} holds {space.kind} items, not {kind} ones",
                field="space_id",
            )
        store, embedder = await self._ready()
        check_embedder(space, embedder)
        return space, store

    async def _new_item(
        self,
        space: Space,
        inputs: Any,
        *,
        agent_id: str | None,
        comment: str,
        sentiment: Any,
        by: str | None = None,
        **fields: Any,
    ) -> tuple[SpaceItem, Vectors]:
        """Validate everything, then summarise and embed (nothing is written here)."""
        checked = check_inputs(inputs)
        if agent_id is not None:
            check_id(agent_id, "agent_id")
        if by is not None:
            check_id(by, "by")
        known = {k.argument for k in space.keys}
        known.update(k.argument for keys in space.agents.values() if keys for k in keys)
        if not known & set(checked):
            raise StateConflict(
                f"inputs give none of the search keys of space {space.space_id!r}: the item "
                "could never be recalled",
                field="inputs",
            )
        comment = check_text(comment, "comment", max_chars=20_000)
        mood = check_sentiment(sentiment)
        now = self.clock()
        feedback: tuple[Feedback, ...] = ()
        if comment or mood != "neutral":
            feedback = (Feedback(comment=comment, sentiment=mood, at=now, by=by or agent_id),)
        stored, texts = await derive_key_texts(
            checked, long_text_chars=space.recall.long_text_chars, summariser=self._summariser_now
        )
        _, embedder = await self._ready()
        vectors = await embed_texts(embedder, texts)
        item = SpaceItem(
            item_id=f"item_{uuid.uuid4().hex}",
            space_id=space.space_id,
            kind=space.kind,
            inputs=stored,
            key_texts=texts,
            sentiment=mood,
            feedback=feedback,
            agent_id=agent_id,
            created_at=now,
            updated_at=now,
            **fields,
        )
        return item, vectors

    async def _query(self, space: Space, inputs: Any, agent_id: str | None) -> Query:
        if agent_id is not None:
            check_id(agent_id, "agent_id")
        _, embedder = await self._ready()
        return await build_query(
            space,
            check_inputs(inputs),
            agent_id=agent_id,
            embedder=embedder,
            summariser=self._summariser_now,
        )

    async def _scored(
        self, space: Space, store: SpaceStore, query: Query
    ) -> list[Scored[SpaceItem]]:
        """Every item of the space scored against ``query`` (unranked)."""
        rows = await store.find_items(self.project_id, space)
        return score_all(query, rows, space.recall)
