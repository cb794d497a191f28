"""The reconciliation core: a pure decision over (candidate, neighbours, thresholds).

:func:`plan_reconcile` never does I/O. The adapter (:mod:`mongomem.ltm.store`)
finds the neighbours — current memories of the same type in the same scope,
the one with the same natural key and the most similar by embedding — asks
the judge when the plan says so (:func:`mongomem.ltm.judge.decide`) and
applies the :class:`Decision`.

**Similarity never decides that a value is unchanged** (SPEC K1): an
embedding scores "two children" and "three children" as high as two
paraphrases. A REINFORCE is decided without the judge only when the two
statements are :func:`~mongomem.ltm.values.equivalent` — the same words after
a value-preserving normalisation, with no changed number, date, unit,
negation, name or antonym-like swap. The rules, in order:

1. Only neighbours of the candidate's own scope and type are considered; others
   are dropped, so no decision ever crosses a scope or a type (SPEC F3).
2. **Key match** (same normalised key): an equivalent statement →
   **REINFORCE**; anything else → the judge decides between REINFORCE and
   UPDATE; without a verdict → **UPDATE** (the newest statement wins, the old
   one stays in history — Boston → Denver).
3. **No key match**: a neighbour with an equivalent statement → **REINFORCE**
   it; else the most similar neighbour at or above ``ambiguous_at`` → the
   judge may say ADD, UPDATE or REINFORCE; without a verdict → **ADD**; no
   neighbour that near → **ADD**.

**Order by the world, not by the queue** (SPEC L2). Every statement has an
evidence order, :func:`evidence_rank`: when it was said (the turns' own time,
``Evidence.at``), then — for statements of one instant, as in a session
imported with one date — its session, the last seq it cites and its snapshot.
A candidate ranked *below* the current version of its key (its evidence is
older) never supersedes it: an equivalent statement REINFORCEs it (one more
evidence point), anything else **enters history** — a version written already
``superseded`` by the current one, numbered after the memory's highest
version (:attr:`Neighbour.head`) and read back in evidence order
(:func:`history_order`) — and the judge may only say REINFORCE instead. So
the current value and the timeline of stated values (every evidence point in
evidence order) do not depend on which snapshot was processed first.

So without a judge similarity changes no decision at all; with one it only
chooses *which* statements the judge is shown (``ambiguous_at``). The value
differences :func:`~mongomem.ltm.values.value_changes` finds are recorded in
the decision (and shown to the judge) as evidence, never used to REINFORCE.
Neighbours below ``floor`` are not even fetched (it only saves work).

A memory's id is derived from (scope, type, normalised key) of its first
version, so two writers that ADD the same key at the same moment collide on
one id and one of them re-plans (see the store's guarantee). A key holds one
current memory: a judge that says ADD for a key match is recorded as UPDATE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from pydantic import Field, ValidationError, model_validator

from mongomem.errors import ConfigError
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.values import equivalent, value_changes
from mongomem.models import (
    CLOSED_STATUSES,
    Action,
    Evidence,
    Frozen,
    MemoryCandidate,
    MemoryScope,
    MemoryStatus,
    MemoryVersion,
)
from mongomem.models import stable_id as _stable_id
from mongomem.settings import ReconcileSettings

__all__ = [
    "MAX_INCARNATIONS",
    "RECONCILE_ACTIONS",
    "Decision",
    "Neighbour",
    "Outcome",
    "Score",
    "Thresholds",
    "Verdict",
    "build_version",
    "evidence_rank",
    "history_order",
    "memory_id_for",
    "plan_reconcile",
    "version_rank",
]


def evidence_rank(evidence: Evidence) -> str:
    """The order of a statement in the world (SPEC L2), as a string that sorts like it:
    when it was said (UTC, to the microsecond), then its session, the last seq it cites
    and its snapshot (or direct write) — deterministic for statements of one instant."""
    at = evidence.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    last = max(evidence.seqs, default=0)
    return f"{at}|{evidence.session_id or ''}|{last:010d}|{evidence.ref}"


def version_rank(version: MemoryVersion) -> str:
    """The rank of a version's latest evidence (its value was last said then)."""
    return max((evidence_rank(e) for e in version.evidence), default="")


def history_order(versions: Sequence[MemoryVersion]) -> list[MemoryVersion]:
    """A memory's versions in the order of the world (SPEC L2): by the rank of each
    version's latest evidence, then by version number. A closing version (DELETE,
    EXPIRE) stays last: it ends the history whatever its evidence."""
    closing = [v for v in versions if v.status in CLOSED_STATUSES]
    stated = [v for v in versions if v.status not in CLOSED_STATUSES]
    stated.sort(key=lambda v: (version_rank(v), v.version))
    return stated + sorted(closing, key=lambda v: v.version)


class Thresholds(Frozen):
    """How far the reconciler looks, and when it asks the judge (``MONGOMEM_RECONCILE_*``).

    ``ambiguous_at`` is the cosine similarity at or above which a memory under
    *another* key is shown to the judge as possibly the same fact (a key match
    is always shown). Lower it to catch more relabelled facts at the cost of
    more judge calls; it never makes a decision by itself.
    """

    ambiguous_at: float = Field(default=0.80, ge=-1, le=1)
    #: Neighbours less similar than this are not looked at (nor logged); it only
    #: saves work, since nothing below ``ambiguous_at`` changes a decision.
    floor: float = Field(default=0.5, ge=-1, le=1)
    neighbours: int = Field(default=5, ge=1, le=100)

    @classmethod
    def from_settings(cls, settings: ReconcileSettings) -> Thresholds:
        """The thresholds configured by ``MONGOMEM_RECONCILE_*`` (validated for order)."""
        try:
            return cls.model_validate(settings.model_dump(include=set(cls.model_fields)))
        except ValidationError as exc:
            raise ConfigError(f"MONGOMEM_RECONCILE_*: {exc}") from exc

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if self.floor > self.ambiguous_at:
            raise ValueError("floor must not exceed ambiguous_at")
        return self


class Neighbour(Frozen):
    """A current memory near a candidate, with its cosine similarity to it."""

    memory_id: str
    version: int = Field(ge=1)
    memory_type: str
    scope: MemoryScope
    key: str
    text: str
    similarity: float
    #: The :func:`evidence_rank` of the current version's latest evidence (``""`` when
    #: unknown: a version written before it was recorded never holds a candidate back).
    rank: str = ""
    #: The memory's highest version number when history versions were written after the
    #: current one (SPEC L2); ``None``: the current version is the highest.
    head: int | None = None

    @property
    def version_id(self) -> str:
        return MemoryVersion.make_version_id(self.memory_id, self.version)

    @property
    def next_version(self) -> int:
        """The number the memory's next version takes."""
        return max(self.version, self.head or 0) + 1


#: What reconciliation may decide (a deletion is never a reconciliation decision).
RECONCILE_ACTIONS: tuple[Action, ...] = (Action.ADD, Action.UPDATE, Action.REINFORCE)


class Verdict(Frozen):
    """The judge's answer about one neighbour (one of :data:`RECONCILE_ACTIONS`);
    ``input_chars``: the size of what it read."""

    memory_id: str
    action: Action
    reason: str
    input_chars: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _reconciles(self) -> Verdict:
        if self.action not in RECONCILE_ACTIONS:
            raise ValueError(f"a judge cannot decide {self.action.value}")
        return self


class Score(Frozen):
    memory_id: str
    version: int
    similarity: float
    key_match: bool


class Decision(Frozen):
    """What to do with one candidate, and why.

    ``memory_id``/``version`` name the version that is current afterwards (the
    new one for ADD and UPDATE, the reinforced one for REINFORCE);
    ``base_version`` is the version superseded (UPDATE) or reinforced.
    ``needs_judge`` is set when the rules leave the decision to the judge and
    no verdict was given: the action is then the judge-less default, and
    ``ask_about`` names the memory the judge is to compare the candidate with.
    ``differences`` are the value changes found between the candidate and that
    (or the reinforced) memory. ``judge_input_chars`` and ``judge_latency_ms``
    describe the judge's call when there was one.
    """

    candidate_id: str
    action: Action
    memory_id: str
    version: int = Field(ge=1)
    base_version: int | None = None
    key_match: bool
    similarity: float | None
    scores: tuple[Score, ...] = ()
    reason: str
    needs_judge: bool = False
    judged: bool = False
    ask_about: str | None = None
    differences: tuple[str, ...] = ()
    judge_input_chars: int | None = None
    judge_latency_ms: float | None = None
    #: An older statement entering history (SPEC L2): the new version (an UPDATE) is
    #: written ``superseded`` by ``base_version``, which stays current.
    historical: bool = False
    #: A REINFORCE by evidence newer than the version's latest: the version's evidence
    #: time moves (and readers of the scope must learn it).
    raises_rank: bool = False
    #: The version an older statement falls inside (its evidence said both before and
    #: after it, SPEC L2): split it first (:mod:`mongomem.ltm.split`), then plan again.
    split: str | None = None

    @property
    def version_id(self) -> str:
        return MemoryVersion.make_version_id(self.memory_id, self.version)

    @property
    def base_version_id(self) -> str | None:
        if self.base_version is None:
            return None
        return MemoryVersion.make_version_id(self.memory_id, self.base_version)


class Outcome(Frozen):
    """What applying a :class:`Decision` did with one candidate
    (:meth:`~mongomem.ltm.store.MemoryStore.reconcile`)."""

    candidate_id: str
    action: Action
    memory_id: str
    version: int
    version_id: str
    reason: str
    replayed: bool = False
    attempts: int = 1


#: How many memories of one key may be deleted before it is refused (the store's bound).
MAX_INCARNATIONS = 1_000


def memory_id_for(scope: MemoryScope, memory_type: str, key: str, incarnation: int = 0) -> str:
    """The id of a memory first added under ``key`` in ``scope``.

    ``incarnation`` counts the memories of that key deleted before it: after a
    deletion the same key is ADDed as a new memory (SPEC J1), never as the
    deleted one again. Incarnation 0 is the id every memory had before deletion
    existed.
    """
    parts: list[object] = [scope.project_id, scope.user_id or "", memory_type, normalize_key(key)]
    if incarnation:
        parts.append(incarnation)
    return _stable_id("mem", *parts)


def _eligible(candidate: MemoryCandidate, neighbours: Iterable[Neighbour]) -> list[Neighbour]:
    latest: dict[str, Neighbour] = {}
    for n in neighbours:
        if n.scope != candidate.scope or n.memory_type != candidate.memory_type:
            continue
        seen = latest.get(n.memory_id)
        # Highest version wins; the rest of the tuple only makes duplicates deterministic.
        if seen is None or (n.version, n.similarity, n.key, n.text) > (
            seen.version,
            seen.similarity,
            seen.key,
            seen.text,
        ):
            latest[n.memory_id] = n
    return sorted(latest.values(), key=lambda n: (-n.similarity, n.memory_id))


def plan_reconcile(
    candidate: MemoryCandidate,
    neighbours: Iterable[Neighbour],
    thresholds: Thresholds | None = None,
    verdict: Verdict | None = None,
) -> Decision:
    """Decide ADD, UPDATE or REINFORCE for ``candidate`` (pure; see the module doc)."""
    t = thresholds or Thresholds()
    ranked = _eligible(candidate, neighbours)
    key = normalize_key(candidate.key)
    keyed = next((n for n in ranked if normalize_key(n.key) == key), None)
    scores = tuple(
        Score(
            memory_id=n.memory_id,
            version=n.version,
            similarity=round(n.similarity, 6),
            key_match=n is keyed,
        )
        for n in ranked[: t.neighbours]
    )

    rank = evidence_rank(candidate.evidence)

    def older(target: Neighbour) -> bool:
        """Is the candidate's evidence older than the target's current version (L2)?"""
        return rank < target.rank

    def decide(
        action: Action,
        target: Neighbour | None,
        reason: str,
        *,
        about: Neighbour | None = None,
        needs_judge: bool = False,
        judged: bool = False,
    ) -> Decision:
        compared = about or target
        differences = () if compared is None else value_changes(compared.text, candidate.text)
        historical = False
        if target is None:
            memory_id, version, base = (
                memory_id_for(candidate.scope, candidate.memory_type, candidate.key),
                1,
                None,
            )
        elif action is Action.UPDATE:
            memory_id, version, base = target.memory_id, target.next_version, target.version
            historical = older(target)
            if historical and not reason.startswith("older evidence"):
                reason = f"older evidence than the current version: enters history ({reason})"
        else:
            memory_id, version, base = target.memory_id, target.version, target.version
        return Decision(
            candidate_id=candidate.candidate_id,
            action=action,
            memory_id=memory_id,
            version=version,
            base_version=base,
            key_match=keyed is not None,
            similarity=None if compared is None else round(compared.similarity, 6),
            scores=scores,
            reason=reason,
            needs_judge=needs_judge,
            judged=judged,
            ask_about=compared.memory_id if needs_judge and compared is not None else None,
            differences=differences,
            historical=historical,
            raises_rank=action is Action.REINFORCE and target is not None and rank > target.rank,
        )

    def judged(target: Neighbour, allowed: tuple[Action, ...]) -> Decision | None:
        if verdict is None or verdict.memory_id != target.memory_id:
            return None
        action = verdict.action if verdict.action in allowed else Action.UPDATE
        chosen = None if action is Action.ADD else target
        return decide(action, chosen, f"judge: {verdict.reason}", about=target, judged=True)

    if keyed is not None:
        sim = keyed.similarity
        if equivalent(keyed.text, candidate.text):
            return decide(Action.REINFORCE, keyed, "same key, equivalent statement")
        settled = judged(keyed, (Action.REINFORCE, Action.UPDATE))
        if settled is not None:
            return settled
        if older(keyed):
            return decide(
                Action.UPDATE,
                keyed,
                f"older evidence than the current version, another statement (similarity "
                f"{sim:.3f}); no verdict: it enters history, the current version stays",
                needs_judge=True,
            )
        return decide(
            Action.UPDATE,
            keyed,
            f"same key, another statement (similarity {sim:.3f}); no verdict: the newest wins",
            needs_judge=True,
        )

    same = next((n for n in ranked if equivalent(n.text, candidate.text)), None)
    if same is not None:
        return decide(Action.REINFORCE, same, "equivalent statement under another key")
    best = ranked[0] if ranked else None
    if best is None:
        return decide(Action.ADD, None, "nothing in scope")
    if best.similarity >= t.ambiguous_at:
        settled = judged(best, (Action.ADD, Action.UPDATE, Action.REINFORCE))
        if settled is not None:
            return settled
        return decide(
            Action.ADD,
            None,
            f"near another key (similarity {best.similarity:.3f}); no verdict",
            about=best,
            needs_judge=True,
        )
    return decide(Action.ADD, None, f"no match (best similarity {best.similarity:.3f})", about=best)


def build_version(candidate: MemoryCandidate, decision: Decision, now: datetime) -> MemoryVersion:
    """The new version an ADD or UPDATE decision writes."""
    if decision.action is Action.REINFORCE:
        raise ValueError("REINFORCE writes no new version")
    historical = decision.historical and decision.base_version_id is not None
    return MemoryVersion(
        version_id=decision.version_id,
        memory_id=decision.memory_id,
        version=decision.version,
        memory_type=candidate.memory_type,
        scope=candidate.scope,
        key=candidate.key,
        fields=dict(candidate.fields),
        text=candidate.text,
        embedding=candidate.embedding,
        status=MemoryStatus.SUPERSEDED if historical else MemoryStatus.CURRENT,
        action=decision.action,
        reinforcement_count=1,
        evidence=(candidate.evidence,),
        created_at=now,
        updated_at=now,
        superseded_at=now if historical else None,
        superseded_by=decision.base_version_id if historical else None,
        reason=decision.reason,
        observed_at=candidate.evidence.at,
        subject=candidate.subject,
        event=candidate.event,
    )
