"""Watcher shares: the session bucket, the settings, each share's reads and watermarks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from mongomem.buckets import BUCKETS, in_share, session_bucket, share_filter
from mongomem.codec import decode, encode
from mongomem.models import SessionEnd, SessionKey, Snapshot, Turn, Watermark
from mongomem.settings import WatcherSettings
from mongomem.stages.watcher_encode import TurnEncoder
from mongomem.stages.watcher_logic import READ_PIPELINE, read_pipeline, token_id
from mongomem.stages.windowing.logic import WindowPolicy, advance, initial_state
from mongomem.stm.turns import end_document, end_from_document, turn_document, turn_from_document

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDLE = 10.0
POLICY = WindowPolicy.of(50, IDLE)


def make_turn(session: SessionKey, seq: int, second: float) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role="user",
        content=f"{session.session_id}#{seq}",
        created_at=T0 + timedelta(seconds=second),
    )


# ------------------------------------------------------------------ the bucket


def test_the_bucket_is_a_fixed_function_of_the_ids() -> None:
    # Fixed values: a change of the function would move sessions between shares.
    assert session_bucket("p", "u", "s") == 1885
    assert session_bucket("proj", "user", "sess") == 1601


def test_the_separator_keeps_ids_apart() -> None:
    assert session_bucket("ab", "c", "d") != session_bucket("a", "bc", "d")


def test_buckets_are_in_range_and_spread() -> None:
    buckets = [session_bucket("p", f"u{i % 7}", f"s{i}") for i in range(4000)]
    assert all(0 <= b < BUCKETS for b in buckets)
    assert len(set(buckets)) > 2000  # not a constant or a few values
    halves = sum(b % 2 for b in buckets)
    assert 1600 < halves < 2400


def test_every_session_is_in_exactly_one_share() -> None:
    for i in range(200):
        ids = ("p", "u", f"s{i}")
        for shares in (1, 2, 3, 4):
            assert sum(in_share(*ids, k, shares) for k in range(shares)) == 1


def test_turn_and_end_documents_carry_the_bucket_and_read_back_without_it() -> None:
    session = SessionKey(project_id="p", user_id="u", session_id="s")
    turn = make_turn(session, 1, 0)
    doc = turn_document(turn)
    assert doc["bucket"] == session_bucket("p", "u", "s")
    assert turn_from_document(doc) == turn
    end = SessionEnd(
        seq_id=Turn.make_id("p", "u", "s", 2),
        project_id="p",
        user_id="u",
        session_id="s",
        seq=2,
        created_at=T0,
    )
    end_doc = end_document(end)
    assert end_doc["bucket"] == session_bucket("p", "u", "s")
    assert end_from_document(end_doc) == end


def test_the_watcher_record_of_a_bucketed_turn_is_that_of_the_turn() -> None:
    session = SessionKey(project_id="p", user_id="u", session_id="s")
    turn = make_turn(session, 3, 0)
    doc = turn_document(turn)
    record = TurnEncoder().record(doc)
    assert record.value == encode(turn)
    assert "bucket" not in decode(record.value, Turn).model_dump()


# ------------------------------------------------------------------ settings and reads


def test_the_shard_must_be_below_the_shards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_WATCHER_SHARDS", "2")
    monkeypatch.setenv("MONGOMEM_WATCHER_SHARD", "2")
    with pytest.raises(ValidationError, match=r"MONGOMEM_WATCHER_SHARD=2 is not in \[0, 2\)"):
        WatcherSettings()
    monkeypatch.setenv("MONGOMEM_WATCHER_SHARD", "1")
    assert (WatcherSettings().shard, WatcherSettings().shards) == (1, 2)
    monkeypatch.setenv("MONGOMEM_WATCHER_SHARDS", "0")
    monkeypatch.setenv("MONGOMEM_WATCHER_SHARD", "0")
    with pytest.raises(ValidationError):
        WatcherSettings()


def test_one_share_reads_exactly_as_before() -> None:
    assert WatcherSettings().shards == 1
    assert read_pipeline(0, 1) == READ_PIPELINE
    assert share_filter(0, 1) == {}
    assert token_id("t") == token_id("t", 0, 1) == "watcher:t"


def test_each_share_matches_its_buckets_and_share_zero_the_unbucketed() -> None:
    match = read_pipeline(1, 4)[0]["$match"]
    assert match == {"operationType": "insert", "fullDocument.bucket": {"$mod": [4, 1]}}
    zero = read_pipeline(0, 4)[0]["$match"]
    assert zero["$or"] == [
        {"fullDocument.bucket": {"$mod": [4, 0]}},
        {"fullDocument.bucket": {"$exists": False}},
    ]
    assert len({token_id("t", k, 4) for k in range(4)} | {token_id("t")}) == 5
    with pytest.raises(ValueError, match="not in"):
        share_filter(4, 4)


# ------------------------------------------------------------------ watermarks per share


def test_old_watermark_records_read_as_one_share() -> None:
    raw = b'{"kind":"watermark","v":1,"data":{"at":"2026-01-01T00:00:00Z","caught_up":true}}'
    mark = decode(raw, Watermark)
    assert (mark.share, mark.shares) == (0, 1)
    with pytest.raises(ValidationError):
        Watermark(at=T0, caught_up=True, share=2, shares=2)


def _sessions_by_share() -> tuple[SessionKey, SessionKey]:
    keys = [SessionKey(project_id="p", user_id="u", session_id=f"s{i}") for i in range(50)]
    zero = next(k for k in keys if session_bucket(k.project_id, k.user_id, k.session_id) % 2 == 0)
    one = next(k for k in keys if session_bucket(k.project_id, k.user_id, k.session_id) % 2 == 1)
    return zero, one


def test_a_share_watermark_never_closes_another_share_session() -> None:
    fast, lagging = _sessions_by_share()  # share 0 caught up, share 1 behind
    states = {s: initial_state(s) for s in (fast, lagging)}
    closed: dict[SessionKey, list[Snapshot]] = {fast: [], lagging: []}

    def apply(event: Turn | Watermark) -> None:
        for session, state in states.items():
            if isinstance(event, Turn) and event.session_id != session.session_id:
                continue
            result = advance(state, event, POLICY)
            states[session] = result.state
            closed[session].extend(result.snapshots)

    apply(make_turn(fast, 1, 0))
    apply(make_turn(lagging, 1, 0))
    # Interleaved: share 0's watermarks run far ahead, share 1's stay behind.
    for second in (5, 20, 40, 80):
        apply(Watermark(at=T0 + timedelta(seconds=second), caught_up=True, share=0, shares=2))
        apply(Watermark(at=T0 + timedelta(seconds=2), caught_up=False, share=1, shares=2))
    assert [len(s.turns) for s in closed[fast]] == [1]
    assert closed[lagging] == []  # share 0 promised nothing about this session
    # The lagging share's next turn (within the idle timeout of its last) still joins.
    apply(make_turn(lagging, 2, 8))
    apply(Watermark(at=T0 + timedelta(seconds=30), caught_up=True, share=1, shares=2))
    assert [[t.seq for t in s.turns] for s in closed[lagging]] == [[1, 2]]


def test_a_one_share_watermark_covers_every_session() -> None:
    fast, lagging = _sessions_by_share()
    for session in (fast, lagging):
        state = advance(initial_state(session), make_turn(session, 1, 0), POLICY).state
        result = advance(state, Watermark(at=T0 + timedelta(seconds=60), caught_up=True), POLICY)
        assert len(result.snapshots) == 1
