"""The pure planner with scripted judges over the labelled decision set (dev split; K1).

The similarity each case's existing memory is given is an extreme (0.99 or
0.0), not an embedder's score, so the test states what the *rules* do:
``bench/decisions.py`` measures the same set with the real default embedder.
The held-out split is not read here (it is run only by the benchmark).
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.decisions import CHANGES, MODES, load_cases, run_mode
from mongomem.ltm.kinds import normalize_key
from mongomem.ltm.values import equivalent
from mongomem.models import Action

DEV = load_cases(split="dev")
ALL = load_cases(split="all")


def test_the_labelled_set_covers_every_type_and_category() -> None:
    assert len(ALL) >= 200
    assert len({c.id for c in ALL}) == len(ALL)
    types = Counter(c.memory_type for c in ALL)
    assert set(types) == {"semantic", "episodic", "procedural", "taxonomic", "medication"}
    categories = Counter(c.category for c in ALL)
    assert len(categories) == 7
    assert min(categories.values()) >= 20
    assert all(len({c.category for c in ALL if c.memory_type == t}) == 7 for t in types)
    assert 0 < sum(c.split == "holdout" for c in ALL) < len(ALL) / 2
    for c in ALL:  # a key holds one current memory: a key match is never expected to ADD
        if normalize_key(c.existing_key) == normalize_key(c.new_key):
            assert c.expected is not Action.ADD, c.id


@pytest.mark.parametrize("similarity", [0.99, 0.0])
async def test_no_mode_keeps_a_changed_value_stale(similarity: float) -> None:
    sims = {c.id: similarity for c in DEV}
    for mode in MODES[1:]:
        for o in await run_mode(mode, DEV, sims):
            if o.case.category in CHANGES:
                assert o.action is not Action.REINFORCE, (mode, o.case.id)
            if o.action is Action.REINFORCE and not o.judged:
                assert equivalent(o.case.existing_text, o.case.new_text), (mode, o.case.id)


async def test_an_oracle_judge_decides_every_case_right_when_similarity_routes_it() -> None:
    outcomes = await run_mode(MODES[2], DEV, {c.id: 0.99 for c in DEV})
    wrong = [o.case.id for o in outcomes if o.action is not o.case.expected]
    assert wrong == []
    asked = sum(o.asked for o in outcomes)
    assert asked == sum(not equivalent(c.existing_text, c.new_text) for c in DEV)


async def test_a_key_match_reaches_the_judge_whatever_the_similarity() -> None:
    keyed = [c for c in DEV if normalize_key(c.existing_key) == normalize_key(c.new_key)]
    outcomes = await run_mode(MODES[2], keyed, {c.id: 0.0 for c in keyed})
    assert [o.case.id for o in outcomes if o.action is not o.case.expected] == []


async def test_without_a_judge_a_key_match_updates_and_the_rest_adds() -> None:
    outcomes = await run_mode(MODES[1], DEV, {c.id: 0.99 for c in DEV})
    for o in outcomes:
        same_key = normalize_key(o.case.existing_key) == normalize_key(o.case.new_key)
        if equivalent(o.case.existing_text, o.case.new_text):
            assert o.action is Action.REINFORCE
        else:
            assert o.action is (Action.UPDATE if same_key else Action.ADD), o.case.id
