"""Hypothesis invariants of the watcher's publish ledger (back-fill overlap, marks)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mongomem.stages.watcher_logic import PublishLedger, Slot


@st.composite
def scenario(draw: st.DrawFn) -> tuple[dict[Slot, int], dict[Slot, int], list[tuple[Slot, int]]]:
    """Sessions with n turns, stored marks ≤ n, and a stream that overlaps the scan."""
    n_sessions = draw(st.integers(min_value=1, max_value=5))
    heads: dict[Slot, int] = {}
    marks: dict[Slot, int] = {}
    for i in range(n_sessions):
        slot = ("p", "u", f"s{i}")
        heads[slot] = draw(st.integers(min_value=0, max_value=8))
        if draw(st.booleans()):
            marks[slot] = draw(st.integers(min_value=0, max_value=heads[slot]))
    # The stream (opened before the scan) carries each session's turns from some
    # point on, interleaved across sessions but in seq order within a session.
    queues = {
        slot: list(range(draw(st.integers(1, head + 1)), head + 1)) for slot, head in heads.items()
    }
    stream: list[tuple[Slot, int]] = []
    while any(queues.values()):
        slot = draw(st.sampled_from([s for s, q in queues.items() if q]))
        stream.append((slot, queues[slot].pop(0)))
    return heads, marks, stream


@given(scenario())
def test_backfill_then_stream_publishes_each_unpublished_turn_once_in_order(
    case: tuple[dict[Slot, int], dict[Slot, int], list[tuple[Slot, int]]],
) -> None:
    heads, marks, stream = case
    ledger = PublishLedger()
    ledger.seed(marks.items())
    published: list[tuple[Slot, int]] = []
    for slot in sorted(heads):  # the scan, in (session, seq) order
        published += [(slot, seq) for seq in range(1, heads[slot] + 1) if ledger.admit(slot, seq)]
    scan_marks = ledger.take_marks()
    ledger.end_backfill()
    published += [(slot, seq) for slot, seq in stream if ledger.admit(slot, seq)]
    for slot, head in heads.items():
        seqs = [seq for s, seq in published if s == slot]
        assert seqs == list(range(marks.get(slot, 0) + 1, head + 1))
        if seqs:
            assert scan_marks[slot] == head
    assert ledger.take_marks() == {}  # the overlap added nothing new


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 50)), max_size=40))
def test_without_backfill_nothing_is_skipped_and_marks_are_maxima(
    events: list[tuple[str, int]],
) -> None:
    ledger = PublishLedger()
    for session, seq in events:
        assert ledger.admit(("p", "u", session), seq)
    expected: dict[Slot, int] = {}
    for session, seq in events:
        slot = ("p", "u", session)
        expected[slot] = max(expected.get(slot, 0), seq)
    assert ledger.take_marks() == expected
    assert ledger.known == {}
