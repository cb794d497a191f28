"""Escalation memory (SPEC H7) and the playground (SPEC H8).

An escalation space stores how people resolved escalations: the inputs, the
resolution comment and the chosen outcome (:meth:`EscalationCalls.resolve_escalation`).
Before an agent raises an escalation it asks :meth:`EscalationCalls.check_escalation`:
when the single best match scores at least the space's ``threshold``, its
outcome is applied and no person is involved; otherwise the escalation is
raised, and its resolution becomes a new item. Only the top match is ever
returned.

:meth:`EscalationCalls.playground` simulates recall without a run: for an
episodic space, which items would be recalled and which just missed (with
their scores); for an escalation space, whether a past resolution would be
applied. It writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongomem.errors import InputError
from mongomem.spaces.base import SpacesBase, optional_text
from mongomem.spaces.matching import to_hit
from mongomem.spaces.models import EscalationDecision, PlaygroundResult, Space, SpaceItem
from mongomem.spaces.scoring import Scored, rank

__all__ = ["EscalationCalls", "decide"]


def decide(scored: list[Scored[SpaceItem]], threshold: float) -> EscalationDecision:
    """Apply the top match's outcome if it clears ``threshold``; else raise (pure)."""
    best = rank(scored, threshold=-2.0, top_k=1)
    if not best:
        return EscalationDecision(apply=False, outcome=None, top=None, threshold=threshold)
    top = best[0]
    apply = top.score >= threshold
    return EscalationDecision(
        apply=apply,
        outcome=top.candidate.outcome if apply else None,
        top=to_hit(top),
        threshold=threshold,
    )


class EscalationCalls(SpacesBase):
    """Escalations resolved, escalations checked, and recall simulated."""

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
        space, store = await self._space_of(space_id, "escalation")
        chosen = optional_text(outcome, "outcome")
        if not chosen or not chosen.strip():
            raise InputError("outcome must say what was decided", field="outcome")
        why = optional_text(resolution, "resolution")
        if why is None:
            raise InputError("resolution must be a string", field="resolution")
        item, vectors = await self._new_item(
            space,
            inputs,
            agent_id=agent_id,
            comment="",
            sentiment="neutral",
            by=resolved_by,
            outcome=chosen,
            resolution=why,
            source={"resolved_by": resolved_by} if resolved_by is not None else {},
        )
        await store.insert_items([store.item_document(self.project_id, space, item, vectors)])
        return item

    async def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision:
        """Before raising: apply a stored outcome (``apply``), or raise the escalation."""
        space, store = await self._space_of(space_id, "escalation")
        scored = await self._scored(space, store, await self._query(space, inputs, agent_id))
        return decide(scored, space.recall.threshold)

    async def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult:
        """What recall would return for ``inputs`` now, and what just missed."""
        space: Space = await self._space(space_id)
        space, store = await self._space_of(space_id, space.kind)
        scored = await self._scored(space, store, await self._query(space, inputs, agent_id))
        if space.kind == "escalation":
            decision = decide(scored, space.recall.threshold)
            top = () if decision.top is None else (decision.top,)
            return PlaygroundResult(
                space_id=space.space_id,
                kind=space.kind,
                matches=top if decision.apply else (),
                near_misses=() if decision.apply else top,
                escalation=decision,
            )
        k = space.recall.top_k
        matches = rank(scored, threshold=space.recall.threshold, top_k=k)
        chosen = {s.candidate_id for s in matches}
        rest = rank([s for s in scored if s.candidate_id not in chosen], threshold=-2.0, top_k=k)
        return PlaygroundResult(
            space_id=space.space_id,
            kind=space.kind,
            matches=tuple(to_hit(s) for s in matches),
            near_misses=tuple(to_hit(s) for s in rest),
        )
