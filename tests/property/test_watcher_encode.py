"""The watcher's fast path encodes exactly what the full path would, or steps aside.

Full path: ``turn_from_document`` (pydantic, turn-id check) then ``codec.encode``.
Whenever :func:`mongomem.stages.watcher_encode.fast_value` returns a record, the full
path must accept the document and give the same bytes, key, session and seq;
:class:`TurnEncoder` must reject (``ValidationError``) exactly the documents
the full path rejects — those go to the dead-letter topic.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import bson
import bson.errors
import pytest
from bson.int64 import Int64
from bson.tz_util import utc as bson_utc
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mongomem.codec import decode, encode
from mongomem.models import Role, SessionKey, Turn, check_identifier
from mongomem.stages.watcher_encode import EncodedTurn, SessionParts, TurnEncoder, fast_value
from mongomem.stm.turns import turn_document, turn_from_document


def _is_identifier(value: str) -> bool:
    try:
        check_identifier(value)
    except ValueError:
        return False
    return True


identifiers = st.one_of(
    st.sampled_from(["p", "u", "s", "bench", "user-1", "sess.2", "Ünï ✈"]),
    # as stored: in NFC (a Turn's ids are normalized, so its id is made from these)
    st.text(min_size=1, max_size=20).filter(_is_identifier).map(check_identifier),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
metadata = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
zones = st.sampled_from([None, UTC, bson_utc])


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    project, user, session = draw(identifiers), draw(identifiers), draw(identifiers)
    seq = draw(st.integers(min_value=1, max_value=2**63 - 1))
    at = draw(st.datetimes()).replace(tzinfo=UTC)
    return Turn(
        turn_id=Turn.make_id(project, user, session, seq),
        project_id=project,
        user_id=user,
        session_id=session,
        seq=seq,
        role=draw(st.sampled_from(Role)),
        content=draw(st.text(max_size=200)),
        metadata=draw(metadata),
        created_at=at,
    )


def full_record(doc: dict[str, Any]) -> EncodedTurn:
    turn = turn_from_document(doc)
    key = SessionKey(
        project_id=turn.project_id, user_id=turn.user_id, session_id=turn.session_id
    ).kafka_key()
    return EncodedTurn(
        (turn.project_id, turn.user_id, turn.session_id),
        turn.seq,
        key,
        encode(turn),
        turn.created_at,
    )


def as_stored(turn: Turn, tz: Any) -> dict[str, Any]:
    """The document as MongoDB hands it back: a plain dict, ``created_at`` in ``tz``."""
    doc = turn_document(turn)
    at = turn.created_at.astimezone(UTC).replace(tzinfo=None)
    doc["created_at"] = at if tz is None else at.replace(tzinfo=tz)
    return doc


@given(turns(), zones)
def test_a_plain_valid_turn_takes_the_fast_path_with_the_full_paths_bytes(
    turn: Turn, tz: Any
) -> None:
    doc = as_stored(turn, tz)
    fast = fast_value(doc, {})
    assert fast is not None
    assert fast == full_record(doc)
    assert decode(fast.value, Turn) == turn


@given(turns())
def test_a_bson_round_trip_gives_the_same_record_on_either_path(turn: Turn) -> None:
    millis = turn.created_at.replace(microsecond=turn.created_at.microsecond // 1000 * 1000)
    stored = turn.model_copy(update={"created_at": millis})
    try:
        raw = bson.encode(turn_document(stored))
    except bson.errors.InvalidDocument:  # a key with NUL in it: MongoDB cannot hold it
        assume(False)
    doc: dict[str, Any] = bson.decode(raw, codec_options=bson.CodecOptions(tz_aware=True))
    record = TurnEncoder().record(doc)  # Int64 values take the full path
    assert record == full_record(doc)
    assert decode(record.value, Turn) == stored


# --------------------------------------------------------------------------- mutations

_FIELDS = [
    "_id",
    "project_id",
    "user_id",
    "session_id",
    "seq",
    "role",
    "content",
    "metadata",
    "created_at",
]
NAIVE = datetime(2026, 1, 1, 12)  # noqa: DTZ001 - what a client without tz_aware reads
_ODD_VALUES: list[object] = [
    None,
    "",
    " x",
    "$x",
    "a..b",
    ".a",
    "a\x00b",
    "x" * 129,
    0,
    -1,
    1.0,
    2.5,
    True,
    Int64(3),
    b"bytes",
    "user",
    "USER",
    "robot",
    [],
    {},
    {1: 2},
    {"k": float("nan")},
    {"k": (1, 2)},
    {"k": NAIVE},
    {"k": b"x"},
    {"k": Int64(1)},
    {"k": {"$x": 1}},
    ("a",),
    NAIVE,
    NAIVE.replace(tzinfo=timezone(timedelta(hours=2))),
    NAIVE.replace(tzinfo=timezone(timedelta(0))),
    date(2026, 1, 1),
    "2026-01-01T00:00:00Z",
    "turn_0123456789abcdef01234567",
]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = as_stored(draw(turns()), draw(zones))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        how = draw(st.sampled_from(["drop", "set", "extra", "turn_id", "seq"]))
        field = draw(st.sampled_from(_FIELDS))
        if how == "drop":
            doc.pop(field, None)
        elif how == "set":
            doc[field] = draw(st.sampled_from(_ODD_VALUES))
        elif how == "extra":
            doc[draw(st.sampled_from(["extra", "_meta", "turn"]))] = 1
        elif how == "turn_id":
            doc["turn_id"] = doc.get("_id")
        else:  # a seq that no longer matches the id
            seq = doc.get("seq")
            doc["seq"] = seq + 1 if type(seq) is int else 1
    return doc


def assert_same_judgement(doc: dict[str, Any]) -> None:
    fast = fast_value(doc, {})
    try:
        expected: EncodedTurn | None = full_record(doc)
    except ValidationError:
        expected = None
    if fast is not None:
        assert fast == expected
    if expected is None:
        with pytest.raises(ValidationError):
            TurnEncoder().record(doc)  # → the dead-letter topic, as before
    else:
        assert TurnEncoder().record(doc) == expected


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), turns().map(lambda t: as_stored(t, UTC))))
def test_the_fast_path_never_accepts_what_the_full_path_would_judge_otherwise(
    doc: dict[str, Any],
) -> None:
    assert_same_judgement(doc)


PLAIN = Turn(
    turn_id=Turn.make_id("p", "u", "s", 7),
    project_id="p",
    user_id="u",
    session_id="s",
    seq=7,
    role=Role.TOOL,
    content="Ünïcödé ✈",
    metadata={"tool_calls": [{"name": "search", "args": {"to": "LIS", "n": 2.5}}]},
    created_at=datetime(2026, 11, 29, 12, 0, 0, 123000, tzinfo=UTC),
)


@pytest.mark.parametrize("field", _FIELDS)
@pytest.mark.parametrize("value", [*_ODD_VALUES, "<drop>"], ids=repr)
@pytest.mark.parametrize("matching_id", [False, True])
def test_one_odd_field_is_judged_as_the_full_path_judges_it(
    field: str, value: object, matching_id: bool
) -> None:
    """``matching_id``: ``_id`` recomputed from the odd session/seq, so only that field is odd."""
    doc = as_stored(PLAIN, bson_utc)
    if value == "<drop>":
        del doc[field]
    else:
        doc[field] = value
    if matching_id:
        parts = [doc.get(f) for f in ("project_id", "user_id", "session_id", "seq")]
        doc["_id"] = Turn.make_id(*parts)  # type: ignore[arg-type]
    assert_same_judgement(doc)


@pytest.mark.parametrize(
    "extra", [{"turn_id": PLAIN.turn_id}, {"extra": 1}, {"seq": 8}, {"_id": "turn_x"}]
)
def test_extra_or_inconsistent_fields_are_judged_as_the_full_path_judges_them(
    extra: dict[str, Any],
) -> None:
    assert_same_judgement(as_stored(PLAIN, bson_utc) | extra)


def test_the_session_memo_holds_only_valid_sessions() -> None:
    turn = Turn(
        turn_id=Turn.make_id("p", "u", "s", 1),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=1,
        role=Role.USER,
        content="hi",
        created_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
    )
    known: dict[tuple[str, str, str], SessionParts] = {}
    bad = as_stored(turn, UTC) | {"session_id": "$s", "_id": Turn.make_id("p", "u", "$s", 1)}
    assert fast_value(bad, known) is None
    assert known == {}
    assert fast_value(as_stored(turn, UTC), known) is not None
    assert list(known) == [("p", "u", "s")]
    assert known["p", "u", "s"].key == b"p\x00u\x00s"
    encoder = TurnEncoder()
    encoder.record(as_stored(turn, UTC))
    with pytest.raises(ValidationError):
        encoder.record(bad)
    assert (encoder.fast, encoder.full) == (1, 1)
