"""P3's backlog (bench/windowing.py ``backlog_turns``): in step, or at phases (``--phases``).

The phases only reorder the backlog: every session still sends each of its seqs once, in
order. In step, every session closes its windows with the same step (half the snapshots
with the backlog's last turns); at phases, those closings spread over the steps.
"""

from __future__ import annotations

import pytest

from bench.windowing import backlog_turns

SESSIONS, PER_SESSION, WINDOW = 60, 40, 20


def closings_per_step(phases: int) -> list[int]:
    return [
        sum(1 for t in turns if t.seq % WINDOW == 0)
        for turns in backlog_turns(SESSIONS, PER_SESSION, phases)
    ]


@pytest.mark.parametrize("phases", [1, 7, 20])
def test_every_session_sends_each_seq_once_in_order(phases: int):
    seqs: dict[str, list[int]] = {}
    for turns in backlog_turns(SESSIONS, PER_SESSION, phases):
        sessions = [t.session_id for t in turns]
        assert len(sessions) == len(set(sessions))  # a step holds a session's turn at most once
        for turn in turns:
            seqs.setdefault(turn.session_id, []).append(turn.seq)
    assert len(seqs) == SESSIONS
    assert all(s == list(range(1, PER_SESSION + 1)) for s in seqs.values())


def test_in_step_every_session_closes_with_the_last_turns():
    closings = closings_per_step(1)
    assert closings[-1] == SESSIONS  # the last step closes a window of every session
    assert closings[WINDOW - 1] == SESSIONS


def test_at_phases_the_closings_spread_over_the_backlog():
    closings = closings_per_step(20)
    assert sum(closings) == SESSIONS * PER_SESSION // WINDOW
    assert max(closings) <= SESSIONS // 20  # a phase's sessions at most, never all at once
    assert closings[-1] == SESSIONS // 20
