"""The export's line format (SPEC J4, mongomem.ltm.export_format): every stored version
survives a line unchanged, relocation keeps the id rules the store relies on, and a
memory's versions out of order or a broken line are refused naming the line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import bson
import pytest
from bson.codec_options import CodecOptions
from hypothesis import given, settings
from hypothesis import strategies as st

from mongomem.errors import InputError
from mongomem.ltm.documents import to_document
from mongomem.ltm.export_format import (
    MemoryGroup,
    check_group,
    check_version,
    moved_id,
    parse_line,
    relocate_group,
    version_line,
)
from mongomem.models import Action, Evidence, MemoryScope, MemoryStatus, MemoryVersion

SOURCE = MemoryScope(project_id="p1", user_id="u1")
TARGET = MemoryScope(project_id="p2", user_id="u2")
T0 = datetime(2026, 1, 1, tzinfo=UTC)

texts = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
millis = st.integers(min_value=0, max_value=10**10).map(lambda ms: T0 + timedelta(milliseconds=ms))
vectors = st.lists(
    st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=4, max_size=4
)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The stored documents of one memory: versions 1..n, the last current or deleted."""
    memory_id = "mem_" + draw(st.text("0123456789abcdef", min_size=24, max_size=24))
    n = draw(st.integers(min_value=1, max_value=4))
    deleted = draw(st.booleans())
    docs = []
    for v in range(1, n + 1):
        last = v == n
        status = MemoryStatus.CURRENT if last else MemoryStatus.SUPERSEDED
        action = Action.ADD if v == 1 else Action.UPDATE
        if last and deleted and n > 1:
            status, action = MemoryStatus.DELETED, Action.DELETE
        closing = action is Action.DELETE
        evidence = (
            ()
            if closing
            else tuple(
                Evidence(
                    source="snapshot",
                    ref=f"snap_{i}",
                    session_id="s",
                    user_id="u1",
                    text=draw(texts),
                    at=draw(millis),
                )
                for i in range(draw(st.integers(min_value=1, max_value=3)))
            )
        )
        at = draw(millis)
        version = MemoryVersion(
            version_id=MemoryVersion.make_version_id(memory_id, v),
            memory_id=memory_id,
            version=v,
            memory_type="semantic",
            scope=SOURCE,
            key=draw(texts),
            fields={"label": draw(texts), "text": draw(texts)},
            text=draw(texts),
            embedding=() if closing else tuple(draw(vectors)),
            status=status,
            action=action,
            reinforcement_count=1,
            evidence=evidence,
            created_at=at,
            updated_at=at,
            superseded_at=None if last else at,
            superseded_by=None if last else MemoryVersion.make_version_id(memory_id, v + 1),
            reason=draw(st.none() | texts),
            actor=draw(st.none() | texts),
        )
        doc = to_document(version, f"cand_{v}")
        doc["candidate_ids"] += [f"cand_r{i}" for i in range(draw(st.integers(0, 3)))]
        if closing:
            del doc["embedding"]
        docs.append(_stored(doc))
    return docs


def _stored(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as MongoDB gives it back (BSON round trip: lists, UTC-aware times)."""
    return bson.decode(bson.encode(doc), CodecOptions(tz_aware=True))


def _without(doc: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in names}


@settings(max_examples=150, deadline=None)
@given(histories())
def test_a_version_survives_its_line_unchanged(docs: list[dict[str, Any]]) -> None:
    for number, doc in enumerate(docs, start=2):
        turns = [[f"turn_{number}_{i}"] for i in range(len(doc["evidence"]))]
        kind, obj = parse_line(version_line(doc, turns), number)
        assert kind == "version"
        assert obj["reinforcement_count"] == len(doc["candidate_ids"])
        assert obj["turn_ids"] == turns
        back = check_version(obj, number, SOURCE, 4)
        assert back == _without(doc, "key_norm")


@settings(max_examples=150, deadline=None)
@given(histories())
def test_relocation_keeps_the_id_rules_and_is_nothing_in_place(docs: list[dict[str, Any]]) -> None:
    group = MemoryGroup(docs[0]["memory_id"], 2, docs=docs)
    check_group(group)
    assert relocate_group(group, SOURCE, SOURCE) == docs
    moved = relocate_group(group, SOURCE, TARGET)
    new_id = moved_id(TARGET, docs[0]["memory_id"])
    assert new_id != docs[0]["memory_id"]
    for before, after in zip(docs, moved, strict=True):
        assert after["memory_id"] == new_id
        assert after["scope"] == TARGET.model_dump()
        assert after["_id"] == MemoryVersion.make_version_id(new_id, before["version"])
        if before.get("superseded_by"):
            assert after["superseded_by"] == MemoryVersion.make_version_id(
                new_id, before["version"] + 1
            )
        same = ("memory_id", "scope", "_id", "superseded_by")
        assert _without(after, *same) == _without(before, *same)  # provenance stays


@settings(max_examples=60, deadline=None)
@given(histories().filter(lambda d: len(d) > 1), st.randoms())
def test_versions_out_of_order_are_refused_naming_the_line(
    docs: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = docs[:]
    while [d["version"] for d in shuffled] == [d["version"] for d in docs]:
        rnd.shuffle(shuffled)
    with pytest.raises(InputError, match=r"^line 7: memory .* not 1\.\.n in order"):
        check_group(MemoryGroup(docs[0]["memory_id"], 7, docs=shuffled))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 3: not a JSON object"),
        ("[1, 2]", "line 3: not a JSON object"),
        ('{"kind": "memory"}', "line 3: unknown kind 'memory'"),
        ("\udcff", "line 3: not a JSON object"),
    ],
)
def test_a_line_that_is_no_export_line_is_named(line: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_line(line, 3)
    with pytest.raises(InputError, match=message):
        parse_line(line.encode("utf-8", "surrogateescape"), 3)
