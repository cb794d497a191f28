"""Hypothesis invariants of short-term memory's input validation (SPEC A3)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import bson
from hypothesis import given, settings
from hypothesis import strategies as st
from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.mongo import Document
from mongomem.errors import InputError
from mongomem.models import Role, SessionKey, Turn, check_identifier
from mongomem.settings import StmSettings
from mongomem.stm.turns import (
    ShortTermMemory,
    session_key,
    turn_document,
    validate_content,
    validate_metadata,
    validate_role,
)

T = TypeVar("T")

ids = st.one_of(
    st.text(max_size=140),
    st.sampled_from(["$x", ".x", "x.", "a..b", "a\x00b", " a", "ok", "user_1", "t-é"]),
    st.integers(),
    st.none(),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=4),
    st.sampled_from([object(), {1, 2}, 1j]),
)
keys = st.one_of(
    st.text(max_size=8), st.sampled_from(["$set", "a.b", "", "\x00", "ok"]), st.integers()
)
json_like = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=12,
)
metadata = st.one_of(st.none(), st.dictionaries(keys, json_like, max_size=5), json_like)


def outcome(fn: Callable[..., T], *args: Any) -> tuple[T | None, InputError | None]:
    """``fn(*args)``, or the :class:`InputError` it raised."""
    try:
        return fn(*args), None
    except InputError as exc:
        return None, exc


def _valid_id(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        check_identifier(value)
    except ValueError:
        return False
    return True


@given(ids, ids, ids)
def test_ids_are_accepted_exactly_when_valid(p: object, u: object, s: object) -> None:
    key, error = outcome(session_key, p, u, s)
    if error is not None:
        first_bad = next(
            f
            for f, v in zip(("project_id", "user_id", "session_id"), (p, u, s), strict=True)
            if not _valid_id(v)
        )
        assert error.field == first_bad
        return
    assert all(_valid_id(v) for v in (p, u, s))
    assert isinstance(key, SessionKey)


@given(st.one_of(st.text(max_size=12), st.sampled_from(list(Role)), st.integers(), st.none()))
def test_roles_are_the_four_known_ones(role: object) -> None:
    accepted, error = outcome(validate_role, role)
    if error is not None:
        assert error.field == "role"
        assert role not in {r.value for r in Role}
        return
    assert accepted is not None
    assert accepted.value == role or accepted == role


@given(st.text(max_size=80), st.integers(min_value=1, max_value=120))
def test_content_size_is_counted_in_utf8_bytes(content: str, limit: int) -> None:
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        size = None
    accepted, error = outcome(validate_content, content, limit)
    if error is not None:
        assert error.field == "content"
        assert size is None or size > limit
        return
    assert accepted == content
    assert size is not None
    assert size <= limit


@settings(max_examples=300)
@given(metadata, st.integers(min_value=2, max_value=400))
def test_accepted_metadata_is_plain_json_that_bson_and_turn_accept(
    meta: object, limit: int
) -> None:
    plain, error = outcome(validate_metadata, meta, limit)
    if error is not None:
        assert error.field == "metadata"
        return
    assert plain is not None
    text = json.dumps(plain, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    assert len(text.encode()) <= limit
    assert json.loads(text) == plain
    bson.encode({"metadata": plain})
    turn = Turn(
        turn_id=Turn.make_id("p", "u", "s", 1),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=1,
        role=Role.USER,
        content="x",
        metadata=plain,
        created_at="2026-01-01T00:00:00Z",
    )
    bson.encode(turn_document(turn))


class _Collection:
    def __init__(self) -> None:
        self.inserted: list[Document] = []

    async def insert_one(self, doc: Document) -> None:
        self.inserted.append(doc)

    async def find_one(self, *args: Any, **kwargs: Any) -> Document | None:
        return None

    def find(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor()


class _Cursor:
    """An empty result: the store holds nothing yet."""

    async def to_list(self, *args: Any) -> list[Document]:
        return []

    def __aiter__(self) -> _Cursor:
        return self

    async def __anext__(self) -> Document:
        raise StopAsyncIteration


class _Database:
    def __init__(self) -> None:
        self.turns = _Collection()

    def __getitem__(self, name: str) -> _Collection:
        return self.turns


@settings(max_examples=300)
@given(
    ids,
    ids,
    ids,
    st.one_of(st.sampled_from(list(Role)), st.text(max_size=10)),
    st.one_of(st.text(max_size=40), st.integers()),
    metadata,
)
def test_record_turn_stores_one_document_or_nothing(
    p: object, u: object, s: object, role: object, content: object, meta: object
) -> None:
    db = _Database()
    stm = ShortTermMemory(
        cast(AsyncDatabase[Document], db), StmSettings(max_content_bytes=32, max_metadata_bytes=200)
    )
    key = SessionKey.model_construct(project_id=p, user_id=u, session_id=s)  # type: ignore[arg-type]
    turn, error = outcome(asyncio.run, stm.record_turn(key, role, content, meta))  # type: ignore[arg-type]
    if error is not None:
        assert error.field in {"project_id", "user_id", "session_id", "role", "content", "metadata"}
        assert db.turns.inserted == []
        return
    assert turn is not None
    assert db.turns.inserted == [turn_document(turn)]
    assert turn.seq == 1
