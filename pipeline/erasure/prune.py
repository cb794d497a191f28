"""The lineage rule of an erasure (SPEC J2), as a pure function on one memory's versions.

:func:`prune` is given every version of one memory and which of their
evidence items (and candidate ids) are erased. It answers what must become of
each version, by these rules:

* an evidence item that is erased is removed from every version; so is each
  erased candidate id, which lowers the reinforcement count (the count *is*
  the number of candidate ids, :mod:`mongomem.ltm.documents`);
* a version (other than a ``DELETE`` version, which carries no evidence) left
  with no evidence is removed: nothing that remains supports its text;
* if no version with evidence remains, the whole memory is removed;
* if the memory was current, the remaining version whose surviving evidence was
  said last becomes (or stays) current — in the order of the world (SPEC L2,
  the ``rank`` of its latest evidence, then its number), not by version number,
  since an older statement that entered history after the current version has
  the higher number. So when the current version was removed, or kept only
  evidence older than another version's, the memory falls back to the last
  text that surviving evidence supports (it is ``reverted``), which is the
  re-judgement by lineage — no model is asked;
* a deleted memory stays deleted (its ``DELETE`` version is kept while any
  evidence-bearing version remains).

A kept version whose candidate ids were all erased keeps one id per surviving
evidence item (``evidence:<ref>``), so its count equals what still supports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Pruned", "VersionFacts", "prune"]

Ev = dict[str, Any]


@dataclass(frozen=True)
class VersionFacts:
    """What :func:`prune` needs of one stored version."""

    version: int
    status: str  # current | superseded | deleted
    evidence: tuple[Ev, ...]
    candidate_ids: tuple[str, ...]


@dataclass
class Pruned:
    """What to do with one memory's versions."""

    delete_all: bool = False
    #: Versions to remove.
    removed: list[int] = field(default_factory=list)
    #: Version → its new (evidence, candidate ids), for versions that lose some.
    changed: dict[int, tuple[tuple[Ev, ...], tuple[str, ...]]] = field(default_factory=dict)
    #: The version that becomes current again (its current version was removed, or is
    #: no longer the latest statement).
    reverted_to: int | None = None
    #: Versions that were current and are kept, but are no longer the latest statement:
    #: they become superseded by ``reverted_to``.
    demoted: list[int] = field(default_factory=list)

    @property
    def untouched(self) -> bool:
        return not (self.delete_all or self.removed or self.changed)


def _by_number(evidence: Sequence[Ev]) -> str:
    return ""


def prune(
    versions: Sequence[VersionFacts],
    erased: Callable[[Ev], bool],
    erased_candidates: frozenset[str] | set[str],
    rank: Callable[[Sequence[Ev]], str] = _by_number,
) -> Pruned:
    """Apply the lineage rule (module docstring) to one memory's ``versions``.

    ``rank``: the evidence order of a version's (surviving) evidence, as a string
    that sorts like it (the store's latest evidence rank); by default every rank
    is equal and the highest version number is the latest."""
    out = Pruned()
    if not versions:
        return out
    ordered = sorted(versions, key=lambda v: v.version)
    kept: list[VersionFacts] = []
    for v in ordered:
        if v.status in ("deleted", "expired"):
            kept.append(v)
            continue
        evidence = tuple(e for e in v.evidence if not erased(e))
        if not evidence:
            out.removed.append(v.version)
            continue
        cids = tuple(c for c in v.candidate_ids if c not in erased_candidates)
        if not cids:
            cids = tuple(f"evidence:{e.get('ref', '')}" for e in evidence)
        if evidence != v.evidence or cids != v.candidate_ids:
            out.changed[v.version] = (evidence, cids)
        kept.append(v)
    if not any(v.status not in ("deleted", "expired") for v in kept):
        return Pruned(delete_all=True, removed=[v.version for v in ordered])
    current = [v.version for v in ordered if v.status == "current"]
    if not current:
        return out  # deleted, expired (or no version current): nothing becomes current

    def surviving(v: VersionFacts) -> tuple[Ev, ...]:
        return out.changed[v.version][0] if v.version in out.changed else v.evidence

    stated = [v for v in kept if v.status not in ("deleted", "expired")]
    latest = max(stated, key=lambda v: (rank(surviving(v)), v.version))
    if latest.status != "current" or len(current) > 1:
        out.reverted_to = latest.version
        out.demoted = [n for n in current if n != latest.version and n not in out.removed]
    return out
