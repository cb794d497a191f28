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
* if the memory was current and its current version was removed, the highest
  remaining version becomes current again: the memory falls back to the last
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
    #: The version that becomes current again (its current version was removed).
    reverted_to: int | None = None

    @property
    def untouched(self) -> bool:
        return not (self.delete_all or self.removed or self.changed)


def prune(
    versions: Sequence[VersionFacts],
    erased: Callable[[Ev], bool],
    erased_candidates: frozenset[str] | set[str],
) -> Pruned:
    """Apply the lineage rule (module docstring) to one memory's ``versions``."""
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
    latest = ordered[-1]
    if latest.status == "current" and latest.version in out.removed:
        out.reverted_to = max(v.version for v in kept if v.status not in ("deleted", "expired"))
    return out
