"""Episodic density: the number of episodes follows what happened (issue 23, item 6).

Two events of one title on different days are two episodes: an episode that
says when it happened carries its dates in its key and text, so one answer
does not merge them (one key, latest turn wins) and the reconciler neither
UPDATEs nor REINFORCEs one into the other (a changed date is never an
equivalent statement). The same event said twice, with its date, stays one.
"""

from __future__ import annotations

from typing import Any

from mongomem.ltm.plan import Neighbour, plan_reconcile
from mongomem.ltm.values import equivalent
from mongomem.models import Action
from mongomem.stages.extractor.core import MERGED, ground, to_candidates
from mongomem.stages.extractor.types import builtin_spec, load_prompt
from mongomem.testing import make_snapshot

EPISODIC = builtin_spec("episodic")
SNAPSHOT = make_snapshot([("user", f"turn {i}") for i in range(1, 21)])


def run(
    title: str, seq: int, day: str | None, account: str = "Jon went for a run."
) -> dict[str, Any]:
    item: dict[str, Any] = {"title": title, "account": account, "participants": ["Jon"]}
    return {**item, "seqs": [seq], "subject": "Jon", "valid_from": day}


def grounded(*items: dict[str, Any]) -> Any:
    return ground(EPISODIC, EPISODIC.output_model.model_validate({"items": list(items)}), SNAPSHOT)


def test_one_title_on_two_days_is_two_episodes_in_one_answer() -> None:
    got = grounded(run("Morning run", 1, "2023-06-03"), run("Morning run", 3, "2023-06-10"))
    assert [i.key for i in got.items] == ["Morning run (2023-06-03)", "Morning run (2023-06-10)"]
    assert [i.fields["title"] for i in got.items] == ["Morning run", "Morning run"]
    assert got.items[0].text == "Morning run (2023-06-03): Jon went for a run."
    assert MERGED not in got.dropped


def test_one_event_listed_twice_stays_one_episode() -> None:
    later = run("Morning run", 3, "2023-06-03", "Jon ran along the river.")
    got = grounded(run("Morning run", 1, "2023-06-03"), later)
    assert [i.text for i in got.items] == ["Morning run (2023-06-03): Jon ran along the river."]
    assert got.dropped == {MERGED: 1}


def test_undated_episodes_of_one_title_merge_as_before() -> None:
    got = grounded(run("Morning run", 1, None), run("Morning run", 3, None))
    assert [i.key for i in got.items] == ["Morning run"]


def test_a_known_key_reused_as_the_title_is_not_dated_twice() -> None:
    got = grounded(run("Morning run (2023-06-03)", 1, "2023-06-03"))
    assert [i.key for i in got.items] == ["Morning run (2023-06-03)"]


def test_two_visits_in_the_same_words_are_neither_equivalent_nor_one_memory() -> None:
    got = grounded(
        run("Visit to grandma", 1, "2023-07-10", "Caroline visited her grandma."),
        run("Visit to grandma", 3, "2023-07-13", "Caroline visited her grandma."),
    )
    first, second = to_candidates(
        EPISODIC, SNAPSHOT, got.items, [[1.0, 0.0], [1.0, 0.0]], model="m", now=SNAPSHOT.closed_at
    )
    assert not equivalent(first.text, second.text)
    stored = Neighbour(
        memory_id="m1",
        version=1,
        memory_type="episodic",
        scope=first.scope,
        key=first.key,
        text=first.text,
        similarity=1.0,  # the same embedding: similarity decides nothing
    )
    assert plan_reconcile(second, [stored]).action is Action.ADD


def test_the_prompt_asks_for_one_episode_per_event_and_caps_nothing_low() -> None:
    prompt = load_prompt("episodic-v2")
    assert "zero, one or two" not in prompt
    assert "one episode per distinct event" in prompt
    assert "Do not merge separate events" in prompt
    assert EPISODIC.output_model.model_fields["items"].metadata[0].max_length >= 50
