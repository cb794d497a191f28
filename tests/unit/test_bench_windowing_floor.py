"""The windowing floor (bench/windowing_floor.py) sends exactly what the stage sends.

A floor that did less of the work than the stage must do — a field left out of the
snapshot, a check skipped — would make the stage's structure look costlier than it is.
"""

from __future__ import annotations

import pytest

from bench.windowing import scoped
from bench.windowing_floor import floor, records, stage_output
from mongomem.settings import load_settings


@pytest.fixture(scope="module")
def pairs() -> list[tuple[bytes, bytes]]:
    return records(sessions=5, per_session=40)


def test_the_floor_sends_the_stages_snapshots_byte_for_byte(pairs: list[tuple[bytes, bytes]]):
    settings = scoped(load_settings(), "floor", max_messages=20, idle_timeout_s=3600)
    sent = floor(pairs, 20)
    assert len(sent) == 10  # 5 sessions × 40 turns in snapshots of 20
    assert sent == stage_output(pairs, settings)


def test_the_floor_checks_each_turn_id(pairs: list[tuple[bytes, bytes]]):
    key, value = pairs[7]
    forged = value.replace(b'"turn_id":"turn_', b'"turn_id":"turn_0', 1)
    with pytest.raises(ValueError, match="turn id"):
        floor([*pairs[:7], (key, forged)], 20)


def test_the_floor_checks_the_role(pairs: list[tuple[bytes, bytes]]):
    key, value = pairs[0]
    with pytest.raises(ValueError, match="wrong type"):
        floor([(key, value.replace(b'"role":"user"', b'"role":"judge"'))], 20)
