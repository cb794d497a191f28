"""The windowing process keeps its startup heap out of garbage collections (P3)."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Iterator
from typing import Any

import pytest

import mongomem.stages.windowing as windowing
from mongomem.settings import load_settings
from mongomem.stages.windowing.worker import YOUNG_OBJECTS, settle_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()  # the rest of the test session collects as usual
    gc.set_threshold(*threshold)


def test_settle_heap_freezes_what_is_alive(unfrozen: None) -> None:
    kept = [object() for _ in range(10)]  # alive across the call
    assert gc.get_freeze_count() == 0
    settle_heap()
    assert gc.get_freeze_count() > 1000  # the imports' objects at least
    frozen = gc.get_freeze_count()
    later = [[i] for i in range(100)]
    gc.collect()
    # Never more: another thread (a client's monitor, in a mixed run) may free frozen
    # objects by reference counting meanwhile, which lowers the count.
    assert gc.get_freeze_count() <= frozen, "objects made later are not frozen"
    collected = {id(x) for x in gc.get_objects()}  # the collected generations only
    assert id(kept) not in collected, "what was alive at the call is frozen"
    assert all(id(x) in collected for x in later), "objects made later are collected as usual"


def test_settle_heap_collects_the_young_generation_less_often(unfrozen: None) -> None:
    gc.set_threshold(700, 10, 10)  # Python's default
    settle_heap()
    assert gc.get_threshold() == (YOUNG_OBJECTS, 10, 10)
    assert YOUNG_OBJECTS > 700


async def test_the_stage_process_settles_its_heap_before_running(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []

    async def run_stage(stage: Any, settings: Any) -> None:
        order.append(f"run_stage {stage.name}")

    monkeypatch.setattr(windowing, "settle_heap", lambda: order.append("settle_heap"))
    monkeypatch.setattr(windowing, "run_stage", run_stage)
    await windowing.main(load_settings(), argparse.Namespace(group_suffix=""))
    assert order == ["settle_heap", "run_stage windowing"]
