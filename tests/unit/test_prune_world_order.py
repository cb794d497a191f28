"""The lineage rule picks what becomes current by the order of the world (SPEC L2, J2).

An older statement that entered history after the current version has the
higher version number; after an erasure the survivor said last is current,
whatever its number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mongomem.erasure.prune import VersionFacts, prune


def ev(session: str, day: int) -> dict[str, Any]:
    return {"ref": f"snap-{session}", "session_id": session, "day": day}


def by_day(evidence: Sequence[dict[str, Any]]) -> str:
    return max((f"{e['day']:04d}" for e in evidence), default="")


def erased(session: str) -> Any:
    return lambda e: e["session_id"] == session


def version(n: int, status: str, *evidence: dict[str, Any]) -> VersionFacts:
    return VersionFacts(
        n, status, tuple(evidence), tuple(f"c{n}-{i}" for i in range(len(evidence)))
    )


def test_the_current_versions_session_erased_hands_current_to_the_latest_survivor() -> None:
    versions = [
        version(1, "current", ev("s3", 2)),  # said last, processed first
        version(2, "superseded", ev("s2", 1)),
        version(3, "superseded", ev("s1", 0)),  # said first, processed last
    ]
    plan = prune(versions, erased("s3"), set(), rank=by_day)
    assert plan.removed == [1]
    assert plan.reverted_to == 2, "the statement of day 1, not the highest number (3)"


def test_a_current_version_left_with_older_evidence_is_superseded_by_the_later_one() -> None:
    versions = [
        version(1, "current", ev("s1", 0), ev("s4", 3)),
        version(2, "superseded", ev("s3", 2)),
    ]
    plan = prune(versions, erased("s4"), set(), rank=by_day)
    assert plan.removed == []
    assert (plan.reverted_to, plan.demoted) == (2, [1])


def test_erasing_a_history_version_leaves_the_current_one() -> None:
    versions = [version(1, "current", ev("s2", 2)), version(2, "superseded", ev("s1", 1))]
    plan = prune(versions, erased("s1"), set(), rank=by_day)
    assert (plan.removed, plan.reverted_to, plan.demoted) == ([2], None, [])


def test_a_deleted_memory_stays_deleted() -> None:
    versions = [
        version(1, "superseded", ev("s2", 2)),
        version(2, "superseded", ev("s1", 1)),
        VersionFacts(3, "deleted", (), ("del",)),
    ]
    plan = prune(versions, erased("s2"), set(), rank=by_day)
    assert plan.removed == [1]
    assert plan.reverted_to is None
