"""The state of one (snapshot, type) from its processing_status entry (operations.progress)."""

from __future__ import annotations

from mongomem.operations.progress import type_progress


def test_states_from_entries() -> None:
    assert type_progress("semantic", None).state == "pending"
    assert type_progress("semantic", {"reconciled": ["c1"]}).state == "pending"  # not extracted
    nothing = type_progress("semantic", {"candidates": []})
    assert (nothing.state, nothing.candidates) == ("done", 0)
    half = type_progress("semantic", {"candidates": ["c1", "c2"], "reconciled": ["c1", "x"]})
    assert (half.state, half.reconciled) == ("pending", 1)
    assert type_progress("semantic", {"candidates": ["c1"], "reconciled": ["c1"]}).state == "done"
    dead = type_progress("semantic", {"dead_letter": {"error": "LLMUnavailable: 500"}})
    assert (dead.state, dead.error) == ("dead_lettered", "LLMUnavailable: 500")
    failed = {"candidates": ["c1"], "failed": [{"candidate_id": "c1", "error": "InputError: x"}]}
    assert type_progress("semantic", failed).state == "dead_lettered"
    replayed = {**failed, "reconciled": ["c1"]}  # the letter was replayed and applied
    assert type_progress("semantic", replayed).state == "done"
    again = {"candidates": ["c1"], "dead_letter": None}  # extracted again after a dead letter
    assert type_progress("semantic", again).state == "pending"
