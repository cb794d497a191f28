"""Hypothesis: the windowing stage's fast paths give what the general paths give.

* :func:`snapshot_value` must write exactly :func:`mongomem.codec.encode`'s
  bytes for any snapshot (or raise what ``encode`` raises);
* :func:`snapshot_document` must build the document the ``model_dump``
  formula built, key order and value types included (the same BSON);
* :func:`snapshot_encoded` must give exactly both of them;
* a snapshot that :class:`~mongomem.stages.windowing.logic.Window` closes
  without validation must be one that validation accepts, unchanged.

The turns may name their speaker (SPEC L3): both fast paths once left it out.

And the fast paths must really be taken for ordinary snapshots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import bson
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import TzInfo

from mongomem.adapters.mongo import Document
from mongomem.codec import encode
from mongomem.models import Role, SessionKey, Snapshot, SnapshotTurn
from mongomem.stages.windowing import snapshot_encode
from mongomem.stages.windowing.logic import Window, WindowPolicy
from mongomem.stages.windowing.snapshot_encode import (
    snapshot_document,
    snapshot_encoded,
    snapshot_value,
)

ZONES = st.sampled_from(
    [
        UTC,
        TzInfo(0),  # what pydantic gives for "...Z"
        timezone(timedelta(0), "zero"),
        timezone(timedelta(hours=5, minutes=30)),
        timezone(-timedelta(hours=8)),
        timezone(timedelta(seconds=-30)),
        TzInfo(3600),
    ]
)
TIMES = st.datetimes(
    # Hypothesis takes naive bounds; ``timezones`` makes the values aware.
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=ZONES,
)
#: Any text, lone surrogates and control characters included.
TEXT = st.text(st.characters(codec=None, categories=None), max_size=40) | st.sampled_from(
    ["", "\ud800", 'q"\\/\x00\x1f\x7f\u2028é😀', "\n\r\t\b\f"]
)
IDS = st.sampled_from(["p", "user-1", "s.1", "ünïcode", "a b", "x" * 128, "😀"])
SPEAKERS = st.none() | st.sampled_from(["Alice", "Dr. Bob", "李雷", "x" * 128])


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    session = SessionKey(project_id=draw(IDS), user_id=draw(IDS), session_id=draw(IDS))
    first = draw(st.integers(1, 2**70))
    count = draw(st.integers(1, 4))
    turns = tuple(
        SnapshotTurn(
            turn_id=draw(TEXT),
            seq=seq,
            role=draw(st.sampled_from(list(Role))),
            content=draw(TEXT),
            created_at=draw(TIMES),
            speaker=draw(SPEAKERS),
        )
        for seq in range(first, first + count)
    )
    return Snapshot(
        snapshot_id=Snapshot.make_id(session, first, first + count - 1),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        first_seq=first,
        last_seq=first + count - 1,
        turns=turns,
        reason=draw(st.sampled_from(["count", "idle", "gap", "end"])),
        closed_at=draw(TIMES),
    )


def model_dump_document(snapshot: Snapshot) -> Document:
    """The document as the stage built it before the fast path (the reference)."""
    data: dict[str, Any] = snapshot.model_dump(mode="python", exclude={"snapshot_id"})
    data["turns"] = [{**t, "role": str(t["role"])} for t in data["turns"]]
    data["turn_ids"] = [t.turn_id for t in snapshot.turns]
    return {"_id": snapshot.snapshot_id, **data}


def shape(value: Any) -> Any:
    """``value`` with every dict as its list of items and every leaf with its exact type."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [shape(v) for v in value]
    return (type(value), value)


@settings(max_examples=400, deadline=None)
@given(snapshots())
def test_snapshot_value_is_the_codec_bytes(snapshot: Snapshot) -> None:
    try:
        expected = encode(snapshot)
    except Exception as exc:  # e.g. a lone surrogate: the fast path raises the same
        with pytest.raises(type(exc)):
            snapshot_value(snapshot)
        return
    assert snapshot_value(snapshot) == expected


@settings(max_examples=400, deadline=None)
@given(snapshots())
def test_snapshot_document_is_the_model_dump_document(snapshot: Snapshot) -> None:
    document, reference = snapshot_document(snapshot), model_dump_document(snapshot)
    assert shape(document) == shape(reference)
    try:
        expected = bson.encode(reference)
    except Exception as exc:  # e.g. a seq beyond 64 bits
        with pytest.raises(type(exc)):
            bson.encode(document)
        return
    assert bson.encode(document) == expected


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_snapshot_encoded_is_the_value_and_the_document(snapshot: Snapshot) -> None:
    try:
        value = snapshot_value(snapshot)
    except Exception as exc:
        with pytest.raises(type(exc)):
            snapshot_encoded(snapshot)
        return
    encoded_value, document = snapshot_encoded(snapshot)
    assert encoded_value == value
    assert shape(document) == shape(snapshot_document(snapshot))


def test_a_speaker_is_written_into_the_value_and_the_document() -> None:
    [snapshot] = closed_snapshots(WindowPolicy.of(2, 10), 2, speaker="Alice")
    value, document = snapshot_encoded(snapshot)
    assert value == encode(snapshot)
    assert [t["speaker"] for t in orjson.loads(value)["data"]["turns"]] == ["Alice", "Alice"]
    assert [t["speaker"] for t in document["turns"]] == ["Alice", "Alice"]
    assert document == model_dump_document(snapshot)


def test_an_ordinary_snapshot_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = closed_snapshots(WindowPolicy.of(3, 10), 3)[0]
    expected = encode(snapshot)

    def refuse(message: object) -> bytes:
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(snapshot_encode, "encode", refuse)
    assert snapshot_value(snapshot) == expected


def closed_snapshots(
    policy: WindowPolicy, turns: int, step_s: float = 1.0, speaker: str | None = None
) -> list[Snapshot]:
    session = SessionKey(project_id="p", user_id="u", session_id="s")
    t0 = datetime(2026, 1, 1, tzinfo=TzInfo(0))
    window = Window(session)
    for seq in range(1, turns + 1):
        turn = SnapshotTurn(
            turn_id=f"t{seq}",
            seq=seq,
            role=Role.USER,
            content=f"#{seq}",
            created_at=t0 + timedelta(seconds=seq * step_s),
            speaker=speaker,
        )
        window.on_turn(turn, policy)
    window.on_watermark(t0 + timedelta(days=1), policy)
    return window.snapshots


@settings(max_examples=200, deadline=None)
@given(
    max_messages=st.integers(1, 5),
    turns=st.integers(1, 12),
    step_s=st.sampled_from([0.5, 1.0, 4.0, 20.0]),
)
def test_closed_snapshots_are_what_validation_gives(
    max_messages: int, turns: int, step_s: float
) -> None:
    """``Window`` builds snapshots without validating them: validation changes nothing."""
    for snapshot in closed_snapshots(WindowPolicy.of(max_messages, 10), turns, step_s):
        validated = Snapshot.model_validate(snapshot.model_dump())
        assert validated == snapshot
        assert encode(validated) == encode(snapshot)
        assert validated.model_fields_set == snapshot.model_fields_set
