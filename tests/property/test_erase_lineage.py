"""The lineage rule of an erasure (SPEC J2), over random interleavings of saves (ADD,
UPDATE, REINFORCE by several users), deletes and erasures, against a model.

The history is simulated the way the reconciler writes it: an ADD or UPDATE writes a
version with the candidate's evidence, a REINFORCE adds its candidate and evidence to
the current version, a delete writes a DELETE version. Erasures apply
:func:`mongomem.erasure.prune.prune`. The model is the rule itself, stated on the
candidates: after erasing users E, the memory exists iff some non-DELETE version has a
candidate of a user outside E; its current text is that of the newest such version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mongomem.erasure.prune import VersionFacts, prune

USERS = ("a", "b", "c")


@dataclass
class Version:
    version: int
    status: str
    text: str
    cands: list[tuple[str, str]] = field(default_factory=list)  # (candidate id, user)

    def facts(self) -> VersionFacts:
        return VersionFacts(
            version=self.version,
            status=self.status,
            evidence=tuple({"ref": c, "user_id": u} for c, u in self.cands),
            candidate_ids=tuple(c for c, _ in self.cands),
        )


Op = tuple[str, Any, Any]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(USERS), st.sampled_from("xyz")),
        st.tuples(st.just("reinforce"), st.sampled_from(USERS), st.none()),
        st.tuples(st.just("delete"), st.none(), st.none()),
        st.tuples(st.just("erase"), st.sampled_from(USERS), st.none()),
    ),
    max_size=25,
)


def apply_erase(versions: list[Version], user: str) -> list[Version]:
    if not versions:
        return versions
    erased_cids = {c for v in versions for c, u in v.cands if u == user}
    plan = prune([v.facts() for v in versions], lambda e: e["user_id"] == user, erased_cids)
    if plan.delete_all:
        return []
    out = []
    for v in versions:
        if v.version in plan.removed:
            continue
        if v.version in plan.changed:
            evidence, ids = plan.changed[v.version]
            assert {e["ref"] for e in evidence} == set(ids)  # the count follows the evidence
            v.cands = [(e["ref"], e["user_id"]) for e in evidence]
        if plan.reverted_to == v.version:
            v.status = "current"
        out.append(v)
    return out


@settings(max_examples=300, deadline=None)
@given(ops)
def test_erasures_follow_the_lineage_of_every_version(script: list[Op]) -> None:
    versions: list[Version] = []
    erased: set[str] = set()
    for n, (kind, user, text) in enumerate(script):
        current = next((v for v in versions if v.status == "current"), None)
        if kind == "add" and user not in erased:
            if current is not None and current.text == text:
                current.cands.append((f"c{n}", user))  # same value: a REINFORCE
            elif not versions or versions[-1].status == "deleted":
                versions = [Version(1, "current", text, [(f"c{n}", user)])]  # a fresh memory
            else:
                assert current is not None
                current.status = "superseded"
                versions.append(Version(current.version + 1, "current", text, [(f"c{n}", user)]))
        elif kind == "reinforce" and current is not None and user not in erased:
            current.cands.append((f"c{n}", user))
        elif kind == "delete" and current is not None:
            current.status = "superseded"
            versions.append(Version(current.version + 1, "deleted", ""))
        elif kind == "erase":
            before = [(v.version, v.status, v.text, list(v.cands)) for v in versions]
            versions = apply_erase(versions, user)
            erased.add(user)
            check(before, versions, user)


def check(
    before: list[tuple[int, str, str, list[tuple[str, str]]]], after: list[Version], user: str
) -> None:
    survivors = [
        (num, status, text)
        for num, status, text, cands in before
        if status != "deleted" and any(u != user for _, u in cands)
    ]
    # nothing of the erased user is left
    assert all(u != user for v in after for _, u in v.cands)
    if not survivors:
        assert after == []  # evidence only from erased turns: the memory is gone
        return
    assert {v.version for v in after if v.status != "deleted"} == {s[0] for s in survivors}
    was_deleted = any(status == "deleted" for _, status, _, _ in before)
    current = [v for v in after if v.status == "current"]
    if was_deleted:
        assert current == []  # a deletion stays
        assert after[-1].status == "deleted"
    else:
        # the newest version some surviving evidence supports is current, and only it
        assert [v.text for v in current] == [survivors[-1][2]]
        assert [v.version for v in current] == [survivors[-1][0]]
    for v in after:  # each kept version keeps exactly its other users' evidence
        old = next(c for num, _, _, c in before if num == v.version)
        assert v.cands == [(c, u) for c, u in old if u != user]


def test_a_version_left_without_evidence_hands_current_back() -> None:
    v1 = VersionFacts(1, "superseded", ({"ref": "s1", "user_id": "b"},), ("c1",))
    v2 = VersionFacts(2, "current", ({"ref": "s2", "user_id": "a"},), ("c2",))
    plan = prune([v1, v2], lambda e: e["user_id"] == "a", {"c2"})
    assert (plan.delete_all, plan.removed, plan.reverted_to) == (False, [2], 1)


def test_a_kept_version_whose_candidates_are_all_erased_counts_its_evidence() -> None:
    v1 = VersionFacts(
        1, "current", ({"ref": "s1", "user_id": "b"}, {"ref": "s2", "user_id": "a"}), ("c9",)
    )
    plan = prune([v1], lambda e: e["user_id"] == "a", {"c9"})
    assert plan.changed == {1: (({"ref": "s1", "user_id": "b"},), ("evidence:s1",))}
