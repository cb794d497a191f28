"""The watcher's pure decisions: token validity, error verdicts, flush timing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stages.watcher_logic import (
    FlushPolicy,
    checkpoint_updates,
    mark_id,
    open_failure_verdict,
    token_id,
    usable_token,
)


@pytest.mark.parametrize(
    ("stored", "usable"),
    [
        ({"_data": "826B0C4F8F000000042B"}, True),
        ({"_data": b"\x01"}, True),
        ({"_data": ""}, False),
        ({"_data": 12}, False),
        ({"format": "other"}, False),
        ("a string", False),
        (None, False),
    ],
)
def test_usable_token(stored: object, usable: bool) -> None:
    assert (usable_token(stored) is not None) == usable


@pytest.mark.parametrize("code", [286, 280, 260, 136])
def test_history_lost_codes_mean_backfill(code: int) -> None:
    assert open_failure_verdict(code, with_token=True) == "lost"
    assert open_failure_verdict(code, with_token=False) == "lost"


def test_unnamed_failures_with_a_token_are_probed_and_without_one_retried() -> None:
    assert open_failure_verdict(None, with_token=True) == "probe"
    assert open_failure_verdict(13, with_token=True) == "probe"
    assert open_failure_verdict(None, with_token=False) == "retry"
    assert open_failure_verdict(89, with_token=False) == "retry"


def test_checkpoint_ids_are_stable_and_per_topic() -> None:
    slot = ("p", "u", "s")
    assert mark_id("a.turns", slot) == mark_id("a.turns", slot)
    assert mark_id("a.turns", slot) != mark_id("b.turns", slot)
    assert mark_id("a.turns", slot) != mark_id("a.turns", ("p", "u", "t"))
    assert token_id("a.turns") != token_id("b.turns")


def test_flush_policy() -> None:
    policy = FlushPolicy(batch_max=3, interval_s=0.5)
    assert not policy.due(0, 10.0, idle=True)
    assert policy.due(1, 0.0, idle=True)
    assert not policy.due(2, 0.1, idle=False)
    assert policy.due(3, 0.0, idle=False)
    assert policy.due(1, 0.5, idle=False)


def test_checkpoint_writes_marks_before_the_token_and_never_lowers_a_mark() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    updates = checkpoint_updates("t.turns", {("p", "u", "s"): 7}, {"_data": "82"}, now)
    assert [f["_id"] for f, _ in updates] == [
        mark_id("t.turns", ("p", "u", "s")),
        token_id("t.turns"),
    ]
    assert updates[0][1]["$max"] == {"seq": 7}
    assert updates[1][1]["$set"]["token"] == {"_data": "82"}
    assert checkpoint_updates("t.turns", {}, None, now) == []
