"""Examples of short-term memory's input rules (SPEC A3); properties are in tests/property."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from mongomem.errors import InputError
from mongomem.models import Role, SessionEnd, Turn
from mongomem.stm.turns import (
    end_document,
    end_from_document,
    session_key,
    turn_document,
    turn_from_document,
    validate_content,
    validate_limit,
    validate_metadata,
    validate_role,
)


@pytest.mark.parametrize(
    ("ids", "field"),
    [
        (("", "u", "s"), "project_id"),
        (("p", "x" * 129, "s"), "user_id"),
        (("p", "u", "a\x00b"), "session_id"),
        (("p", "u", "a\nb"), "session_id"),
        (("$where", "u", "s"), "project_id"),
        (("p", "..", "s"), "user_id"),
        (("p", "u", 7), "session_id"),
    ],
)
def test_bad_ids_name_the_field(ids: tuple[object, object, object], field: str) -> None:
    with pytest.raises(InputError) as caught:
        session_key(*ids)
    assert caught.value.field == field


def test_roles() -> None:
    assert validate_role("tool") is Role.TOOL
    with pytest.raises(InputError, match="user, assistant, system, tool"):
        validate_role("robot")


def test_content_limit_counts_bytes() -> None:
    assert validate_content("é" * 5, 10) == "é" * 5
    with pytest.raises(InputError, match="11 bytes"):
        validate_content("é" * 5 + "x", 10)
    with pytest.raises(InputError, match="string"):
        validate_content(b"bytes", 10)


def test_metadata_rules() -> None:
    assert validate_metadata(None, 10) == {}
    assert validate_metadata({"a": (1, 2.5, None)}, 100) == {"a": [1, 2.5, None]}
    for bad, reason in [
        ({"a": {"$gt": 1}}, r"metadata\.a key '\$gt'"),
        ({"a.b": 1}, "contain '.'"),
        ({1: "x"}, "not a string"),
        (
            {"a": datetime(2026, 1, 1, tzinfo=UTC)},
            r"metadata\.a is not JSON-serialisable \(a datetime\)",
        ),
        ({"a": float("inf")}, "JSON cannot hold"),
        ({"a": 2**64}, "outside 64 bits"),
        ({"a": "x" * 100}, "the limit is 50"),
        (["not", "a", "mapping"], "must be a mapping"),
    ]:
        with pytest.raises(InputError, match=reason) as caught:
            validate_metadata(bad, 50)
        assert caught.value.field == "metadata"


def test_limit() -> None:
    assert validate_limit(5, 10) == 5
    for bad in (0, 11, True, "5"):
        with pytest.raises(InputError):
            validate_limit(bad, 10)


def test_document_round_trip_reads_naive_dates_as_utc() -> None:
    turn = Turn(
        turn_id=Turn.make_id("p", "u", "s", 3),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=3,
        role=Role.ASSISTANT,
        content="hi",
        metadata={"k": [1]},
        created_at=datetime.fromisoformat("2026-01-01T10:00:00.123000+00:00"),
    )
    doc = turn_document(turn)
    assert doc["_id"] == turn.turn_id
    naive = {**doc, "created_at": turn.created_at.replace(tzinfo=None)}
    assert turn_from_document(naive) == turn


def test_a_turn_marked_with_its_snapshot_reads_as_the_turn() -> None:
    """Windowing marks snapshotted turns with ``snapshot_id``: recent turns must still read them."""
    turn = Turn(
        turn_id=Turn.make_id("p", "u", "s", 1),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=1,
        role=Role.USER,
        content="hi",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    marked = {**turn_document(turn), "snapshot_id": "snap_0123456789abcdef01234567"}
    assert turn_from_document(marked) == turn


def test_a_session_end_document_round_trips_and_is_no_turn() -> None:
    end = SessionEnd(
        seq_id=Turn.make_id("p", "u", "s", 4),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=4,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    doc = end_document(end)
    assert doc["event"] == "end"
    assert end_from_document({**doc, "created_at": end.created_at.replace(tzinfo=None)}) == end
    with pytest.raises(ValidationError):
        turn_from_document(doc)
    with pytest.raises(ValidationError):
        end_from_document({**doc, "event": "pause"})
    with pytest.raises(ValidationError):
        end_from_document({k: v for k, v in doc.items() if k != "event"})
