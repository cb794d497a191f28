"""Hypothesis: the windowing stage's fast turn reader agrees with the general decoder.

:meth:`TurnReader.read` parses with orjson and checks a turn by hand, and
falls back to :func:`read_generic` (``mongomem.codec.decode``) when unsure.
For any input — well-formed turns, every kind of damage to one, watermarks and
arbitrary bytes — both must accept the same records with the same result, and
refuse the same records with ``MessageDecodeError``. And the fast path must
really be taken for ordinary turns, or it would not be a fast path.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mongomem.codec import encode
from mongomem.errors import MessageDecodeError
from mongomem.models import Turn, Watermark
from mongomem.stages.windowing.reader import TurnReader, TurnRecord, read_generic

IDS = st.one_of(
    st.sampled_from(["p", "user-1", "s.1", "ünïcode", "a b"]),
    st.text(min_size=0, max_size=6),  # empty, control characters, '$', dots, whitespace
    st.sampled_from(["", "$x", ".x", "x.", "a..b", " x", "x\x00", "x" * 129, "\ud800"]),
)
AWARE_TIMES = st.one_of(
    st.datetimes(
        # Hypothesis takes naive bounds; ``timezones`` makes the values aware.
        min_value=datetime(1971, 1, 1),  # noqa: DTZ001
        max_value=datetime(2100, 1, 1),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    ).map(lambda d: d.isoformat()),
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5Z"]),
)
TIMES = st.one_of(
    AWARE_TIMES,
    st.sampled_from(
        [
            "2026-01-01T00:00:00",  # naive
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01 00:00:00+00:00",
            "yesterday",
            "",
        ]
    ),
    st.integers(-(2**40), 2**40),
    st.none(),
)
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


VALID = {
    "turn_id": Turn.make_id("p", "u", "s", 1),
    "project_id": "p",
    "user_id": "u",
    "session_id": "s",
    "seq": 1,
    "role": "user",
    "content": "first",
    "created_at": "2026-01-01T00:00:00Z",
}


@st.composite
def turn_data(draw: st.DrawFn) -> dict[str, Any]:
    """A valid turn's ``data`` (with or without metadata)."""
    project, user, session = (
        draw(st.sampled_from(["p", "user-1", "s.1", "ünïcode"])) for _ in "pus"
    )
    seq = draw(st.integers(1, 10**12))
    data: dict[str, Any] = {
        "turn_id": Turn.make_id(project, user, session, seq),
        "project_id": project,
        "user_id": user,
        "session_id": session,
        "seq": seq,
        "role": draw(st.sampled_from(["user", "assistant", "system", "tool"])),
        "content": draw(st.text(max_size=30)),
        "created_at": draw(AWARE_TIMES),
    }
    if draw(st.booleans()):
        data["metadata"] = draw(st.dictionaries(st.text(max_size=4), ANY_JSON, max_size=3))
    return data


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, Any]:
    """A turn's ``data`` with one or two things changed (it may still be valid)."""
    data = draw(turn_data())
    for _ in range(draw(st.integers(1, 2))):
        field = draw(st.sampled_from([*Turn.model_fields, "extra"]))
        action = draw(st.sampled_from(["drop", "set", "retype"]))
        if action == "drop":
            data.pop(field, None)
        elif field in ("project_id", "user_id", "session_id"):
            data[field] = draw(IDS)
            if draw(st.booleans()):  # keep the turn id consistent with the new ids
                data["turn_id"] = _id_or_none(data)
        elif field == "seq":
            data[field] = draw(
                st.one_of(st.integers(-2, 2**70), st.sampled_from(["3", 3.0, True, None, "x"]))
            )
            if draw(st.booleans()):
                data["turn_id"] = _id_or_none(data)
        elif field == "created_at":
            data[field] = draw(TIMES)
        elif field == "role":
            data[field] = draw(st.sampled_from(["user", "USER", "bot", "", 1, None]))
        elif field == "metadata":
            data[field] = draw(st.one_of(ANY_JSON, st.dictionaries(st.text(max_size=3), ANY_JSON)))
        else:
            data[field] = draw(ANY_JSON)
    return data


def _id_or_none(data: dict[str, Any]) -> Any:
    try:
        return Turn.make_id(data["project_id"], data["user_id"], data["session_id"], data["seq"])
    except (KeyError, UnicodeEncodeError):
        return None


def envelope(data: Any, kind: Any = "turn", version: Any = 1) -> bytes:
    return json.dumps({"kind": kind, "v": version, "data": data}, ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def outcome(read: Any, raw: bytes | None) -> Any:
    try:
        result = read(raw)
    except MessageDecodeError:
        return "refused"
    if isinstance(result, TurnRecord):
        turn = result.turn
        return (
            "turn",
            result.session,
            result.key,
            turn,
            turn.model_dump_json(),
            turn.created_at.utcoffset(),
        )
    if result is None:
        return "skipped"  # a window-tick of an older version
    return ("watermark", result, result.model_dump_json())


def assert_agree(raw: bytes | None) -> None:
    assert outcome(TurnReader().read, raw) == outcome(read_generic, raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn_data())
def test_well_formed_turns_take_the_fast_path_and_read_the_same(data: dict[str, Any]) -> None:
    raw = envelope(data)
    reader = TurnReader()
    fast = reader._fast(raw)
    assert fast is not None, "an ordinary turn must not fall back to the general decoder"
    assert outcome(reader.read, raw) == outcome(read_generic, raw)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_damaged_turns_are_accepted_or_refused_alike(data: dict[str, Any]) -> None:
    assert_agree(envelope(data))


@settings(max_examples=300, deadline=None)
@given(
    turn_data(),
    st.sampled_from(["turn", "Turn", "watermark", "window-tick", "snapshot", None, 1]),
    st.sampled_from([1, 1.0, True, "1", 2, 0, None]),
)
def test_envelopes_of_any_kind_and_version_are_read_alike(
    data: dict[str, Any], kind: Any, version: Any
) -> None:
    assert_agree(envelope(data, kind, version))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=40), ANY_JSON.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bytes_are_read_alike(raw: bytes) -> None:
    assert_agree(raw)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"\xef\xbb\xbf"
        + encode(Watermark(caught_up=True, at=datetime(2026, 1, 1, tzinfo=UTC))),  # BOM
        encode(Watermark(caught_up=True, at=datetime(2026, 1, 1, tzinfo=UTC))),
        envelope({"at": "2026-01-01T00:00:00Z"}, "window-tick"),
        b'{"kind":"turn","v":1,"data":{"seq":NaN}}',
        envelope({**VALID, "metadata": {"x": float("inf")}}),  # json reads Infinity; orjson not
        b'{"kind":"turn","kind":"turn","v":1,"v":1,"data":{}}',  # repeated keys
        json.dumps({"kind": "turn", "v": 1, "data": {}}).encode("utf-16"),
    ],
)
def test_edge_records_are_read_alike(raw: bytes | None) -> None:
    assert_agree(raw)


def test_a_repeated_key_is_read_as_the_general_decoder_reads_it() -> None:
    raw = envelope(VALID).replace(b'"content"', b'"content":"zeroth","content"')
    assert_agree(raw)
    assert TurnReader().read(raw).turn.content == "first"  # type: ignore[union-attr]
