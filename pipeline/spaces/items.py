"""Episodic item calls of :class:`~mongomem.spaces.AsyncSpaces` (SPEC H2, H3, H4).

Items are added with :meth:`EpisodicCalls.add_item`, or promoted from feedback
on a run or on one part of its output (:meth:`EpisodicCalls.promote_feedback`).
Both first search the space for near-duplicates and act on the caller's
choice (:mod:`mongomem.spaces.dedupe`); with no choice and duplicates found,
nothing is stored. :meth:`EpisodicCalls.recall` returns the best matches
(scoring in :mod:`mongomem.spaces.scoring`).

Write order without transactions: *replace* inserts the new item before it
deletes the chosen ones (a crash in between leaves both, never neither);
*merge* rewrites the one kept item in a single write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongomem.errors import InputError
from mongomem.spaces.base import SpacesBase, check_outputs, optional_text
from mongomem.spaces.catalog import check_id
from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace, merge_into
from mongomem.spaces.matching import Query, to_hit
from mongomem.spaces.models import AddResult, RecallHit, Sentiment, Space, SpaceItem
from mongomem.spaces.scoring import rank
from mongomem.spaces.store import SpaceStore, Vectors

__all__ = ["MAX_DUPLICATES", "EpisodicCalls"]

#: Most near-duplicates one add reports.
MAX_DUPLICATES = 10


class EpisodicCalls(SpacesBase):
    """Recall, duplicate detection, adding and promoting episodic items."""

    async def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        """The space's best matches for ``inputs`` (threshold, top-k, mode: the space's)."""
        space, store = await self._space_of(space_id, "episodic")
        scored = await self._scored(space, store, await self._query(space, inputs, agent_id))
        best = rank(scored, threshold=space.recall.threshold, top_k=space.recall.top_k)
        return [to_hit(s) for s in best]

    async def find_duplicates(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        """Items at least ``duplicate_threshold`` similar to ``inputs`` (best first)."""
        space, store = await self._space_of(space_id, "episodic")
        scored = await self._scored(space, store, await self._query(space, inputs, agent_id))
        best = rank(scored, threshold=space.recall.duplicate_threshold, top_k=MAX_DUPLICATES)
        return [to_hit(s) for s in best]

    async def _duplicates_of(
        self, space: Space, store: SpaceStore, item: SpaceItem, vectors: Vectors
    ) -> tuple[RecallHit, ...]:
        keys = space.keys_for(item.agent_id)
        weights = {k.argument: k.weight for k in keys if k.argument in vectors}
        if not weights:
            return ()
        query = Query(
            weights=weights,
            texts={a: item.key_texts[a] for a in weights},
            vectors={a: vectors[a] for a in weights},
        )
        scored = await self._scored(space, store, query)
        best = rank(scored, threshold=space.recall.duplicate_threshold, top_k=MAX_DUPLICATES)
        return tuple(to_hit(s) for s in best)

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
        return await self._add(
            space_id,
            inputs=inputs,
            outputs=outputs,
            outcome=outcome,
            comment=comment,
            sentiment=sentiment,
            agent_id=agent_id,
            on_duplicate=on_duplicate,
            source={},
        )

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
        """Make a user's feedback on a run (``trace_id``), or on one ``part`` of its
        outputs, an item (SPEC H3). With ``part``, the item keeps only that output."""
        check_id(trace_id, "trace_id")
        kept = check_outputs(outputs)
        source = {"trace_id": trace_id}
        if part is not None:
            if not isinstance(part, str) or part not in kept:
                raise InputError(f"part {part!r} is not one of the run's outputs", field="part")
            kept = {part: kept[part]}
            source["part"] = part
        return await self._add(
            space_id,
            inputs=inputs,
            outputs=kept,
            outcome=outcome,
            comment=comment,
            sentiment=sentiment,
            agent_id=agent_id,
            on_duplicate=on_duplicate,
            source=source,
        )

    async def _add(
        self,
        space_id: str,
        *,
        inputs: Any,
        outputs: Any,
        outcome: Any,
        comment: str,
        sentiment: Any,
        agent_id: str | None,
        on_duplicate: Any,
        source: dict[str, str],
    ) -> AddResult:
        if on_duplicate is not None and not isinstance(on_duplicate, AddAnyway | Replace | Merge):
            raise InputError(
                "on_duplicate must be AddAnyway(), Replace(item_ids=...) or Merge()",
                field="on_duplicate",
            )
        space, store = await self._space_of(space_id, "episodic")
        item, vectors = await self._new_item(
            space,
            inputs,
            agent_id=agent_id,
            comment=comment,
            sentiment=sentiment,
            outputs=check_outputs(outputs),
            outcome=optional_text(outcome, "outcome"),
            source=source,
        )
        dups = await self._duplicates_of(space, store, item, vectors)
        if isinstance(on_duplicate, Replace):
            chosen = await store.find_items(self.project_id, space, on_duplicate.item_ids)
            missing = set(on_duplicate.item_ids) - {i.item_id for i, _ in chosen}
            if missing:
                raise InputError(
                    f"no such items in this space: {', '.join(sorted(missing))}",
                    field="on_duplicate.item_ids",
                )
            await store.insert_items([store.item_document(self.project_id, space, item, vectors)])
            await store.delete_items(self.project_id, space.space_id, on_duplicate.item_ids)
            return AddResult(
                action="replaced", item=item, duplicates=dups, removed=on_duplicate.item_ids
            )
        if dups and isinstance(on_duplicate, Merge):
            closest = dups[0].item
            merged = merge_into(
                closest, item, sentiment_wins=on_duplicate.sentiment_wins, now=self.clock()
            )
            [(_, kept_vectors)] = await store.find_items(self.project_id, space, [closest.item_id])
            await store.replace_item(
                store.item_document(self.project_id, space, merged, kept_vectors)
            )
            return AddResult(action="merged", item=merged, duplicates=dups)
        if dups and on_duplicate is None:
            return AddResult(action="needs-choice", item=None, duplicates=dups)
        await store.insert_items([store.item_document(self.project_id, space, item, vectors)])
        return AddResult(action="added", item=item, duplicates=dups)
