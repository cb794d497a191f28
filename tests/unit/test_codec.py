"""Kafka envelopes: round trips, and clear errors (never crashes) on bad bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from mongomem.codec import decode, encode, peek_kind
from mongomem.errors import MessageDecodeError
from mongomem.models import (
    Evidence,
    MemoryCandidate,
    MemoryScope,
    Role,
    SessionKey,
    Snapshot,
    SnapshotTurn,
    Turn,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def make_turn(seq: int = 1) -> Turn:
    return Turn(
        turn_id=Turn.make_id("p", "u", "s", seq),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=seq,
        role=Role.USER,
        content="My home airport is Boston. Ünïcödé ✈",
        metadata={"channel": "web", "n": [1, 2]},
        created_at=NOW,
    )


def make_snapshot() -> Snapshot:
    turns = tuple(
        SnapshotTurn(turn_id=t.turn_id, seq=t.seq, role=t.role, content=t.content, created_at=NOW)
        for t in (make_turn(1), make_turn(2))
    )
    key = SessionKey(project_id="p", user_id="u", session_id="s")
    return Snapshot(
        snapshot_id=Snapshot.make_id(key, 1, 2),
        project_id="p",
        user_id="u",
        session_id="s",
        first_seq=1,
        last_seq=2,
        turns=turns,
        reason="count",
        closed_at=NOW,
    )


def make_candidate() -> MemoryCandidate:
    return MemoryCandidate(
        candidate_id=MemoryCandidate.make_id("snap_x", "semantic", "v1", 0),
        memory_type="semantic",
        scope=MemoryScope(project_id="p", user_id="u"),
        key="home-airport",
        fields={"label": "home-airport", "text": "The user's home airport is Boston."},
        text="The user's home airport is Boston.",
        embedding=(0.6, 0.8),
        evidence=Evidence(source="snapshot", ref="snap_x", at=NOW),
        prompt_version="v1",
        created_at=NOW,
    )


@pytest.mark.parametrize("message", [make_turn(), make_snapshot(), make_candidate()])
def test_round_trip(message: Turn | Snapshot | MemoryCandidate) -> None:
    raw = encode(message)
    assert json.loads(raw)["v"] == 1
    assert decode(raw, type(message)) == message
    assert peek_kind(raw) in {"turn", "snapshot", "candidate"}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "tombstone"),
        (b"\xff\xfe", "not a JSON envelope"),
        (b"[1, 2]", "JSON object"),
        (b'{"kind": "snapshot", "v": 1, "data": {}}', "expected a 'turn'"),
        (b'{"kind": "turn", "v": 99, "data": {}}', "schema version 99"),
        (b'{"kind": "turn", "v": 1, "data": {"seq": 0}}', "invalid 'turn'"),
    ],
)
def test_bad_bytes_raise_a_decode_error(raw: bytes | None, reason: str) -> None:
    with pytest.raises(MessageDecodeError, match=reason):
        decode(raw, Turn)


def test_tampered_ids_are_rejected() -> None:
    data = json.loads(encode(make_turn()))
    data["data"]["seq"] = 2
    with pytest.raises(MessageDecodeError, match="turn_id does not match"):
        decode(json.dumps(data).encode(), Turn)


def test_aware_datetimes_are_required() -> None:
    data = json.loads(encode(make_turn()))
    data["data"]["created_at"] = "2026-11-29T12:00:00"
    with pytest.raises(MessageDecodeError, match="timezone"):
        decode(json.dumps(data).encode(), Turn)
