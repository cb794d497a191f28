"""The pure parts of memory spaces: scoring, merge, escalation decisions, encryption,
validation (SPEC H1, H2, H4, H7)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from mongomem.errors import ConfigError, InputError
from mongomem.spaces import RecallSettings, SearchKey, Space, SpaceItem, SpacesSettings
from mongomem.spaces.catalog import check_keys, check_recall, key_change_warning
from mongomem.spaces.crypto import PayloadCipher, cipher_from
from mongomem.spaces.dedupe import merge_into
from mongomem.spaces.escalations import decide
from mongomem.spaces.models import Feedback
from mongomem.spaces.scoring import Scored, keyword_overlap, rank, score_item, tokens

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def item(item_id: str = "i1", sentiment: str = "neutral", **kw: object) -> SpaceItem:
    return SpaceItem.model_validate(
        {
            "item_id": item_id,
            "space_id": "s",
            "kind": "episodic",
            "inputs": {"q": "x"},
            "key_texts": {"q": "x"},
            "sentiment": sentiment,
            "created_at": NOW,
            "updated_at": NOW,
            **kw,
        }
    )


def test_tokens_drop_case_punctuation_and_stop_words() -> None:
    assert tokens("The Refund, for my BLENDER!") == {"refund", "blender"}
    assert keyword_overlap("refund blender", "a blender broke") == 0.5
    assert keyword_overlap("the of", "anything") == 0.0


def test_hybrid_score_by_hand() -> None:
    result = score_item(
        "x",
        "x",
        weights={"q": 3.0, "tier": 1.0},
        query_vectors={"q": [1.0, 0.0], "tier": [1.0, 0.0]},
        query_texts={"q": "refund blender", "tier": "gold"},
        item_vectors={"q": [0.6, 0.8]},  # cos 0.6; the item has no "tier"
        item_texts={"q": "blender broke", "tier": "gold"},
        mode="hybrid",
        alpha=0.25,
    )
    assert result.per_argument == {"q": pytest.approx(0.6), "tier": 0.0}
    assert result.meaning == pytest.approx((3 * 0.6 + 0) / 4)
    assert result.keyword == pytest.approx((3 * 0.5 + 1 * 1.0) / 4)
    assert result.score == pytest.approx(0.75 * 0.45 + 0.25 * 0.625)


def test_rank_breaks_ties_by_id_and_cuts_at_top_k() -> None:
    scored = [Scored(n, n, s, s, 0.0, {}) for n, s in [("b", 0.5), ("a", 0.5), ("c", 0.9)]]
    assert [s.candidate_id for s in rank(scored, threshold=0.5, top_k=2)] == ["c", "a"]
    assert rank(scored, threshold=0.95, top_k=5) == []


def test_merge_needs_a_winner_when_sentiments_differ() -> None:
    old = item(
        "old", "positive", feedback=[Feedback(comment="great", sentiment="positive", at=NOW)]
    )
    new = item(
        "new", "negative", feedback=[Feedback(comment="wrong", sentiment="negative", at=NOW)]
    )
    with pytest.raises(InputError) as refused:
        merge_into(old, new, sentiment_wins=None, now=NOW)
    assert refused.value.field == "on_duplicate.sentiment_wins"
    merged = merge_into(old, new, sentiment_wins="new", now=NOW)
    assert merged.item_id == "old"
    assert [f.comment for f in merged.feedback] == ["great", "wrong"]
    assert merged.sentiment == "negative"
    assert merge_into(old, new, sentiment_wins="existing", now=NOW).sentiment == "positive"
    same = merge_into(old, item("n2", "positive"), sentiment_wins=None, now=NOW)
    assert same.sentiment == "positive"


def test_escalation_decision_returns_only_the_top_match() -> None:
    a = Scored(item("a", outcome="refund"), "a", 0.8, 0.8, 0.0, {})
    b = Scored(item("b", outcome="deny"), "b", 0.6, 0.6, 0.0, {})
    applied = decide([b, a], threshold=0.7)
    assert applied.apply
    assert applied.outcome == "refund"
    assert applied.top is not None
    assert applied.top.item.item_id == "a"
    raised = decide([b, a], threshold=0.9)
    assert not raised.apply
    assert raised.outcome is None
    assert raised.top is not None
    assert raised.top.item.item_id == "a"
    assert decide([], threshold=0.5).top is None


def test_cipher_round_trip_is_bound_to_its_place() -> None:
    cipher = PayloadCipher(bytes(range(32)))
    sealed = cipher.seal({"a": "secret"}, project_id="p", space_id="s", item_id="i")
    assert b"secret" not in sealed
    assert cipher.open(sealed, project_id="p", space_id="s", item_id="i") == {"a": "secret"}
    with pytest.raises(ConfigError, match="does not decrypt"):
        cipher.open(sealed, project_id="other", space_id="s", item_id="i")
    with pytest.raises(ConfigError, match="32 bytes"):
        PayloadCipher(b"short")


def test_cipher_from_settings() -> None:
    assert cipher_from(SpacesSettings()) is None
    key = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
    made = cipher_from(SpacesSettings(encryption_key=key))
    assert made is not None
    assert made.key_id == PayloadCipher(bytes(range(32))).key_id
    with pytest.raises(ConfigError, match="base64"):
        cipher_from(SpacesSettings(encryption_key="not base64 !!"))


def test_key_and_recall_checks_name_the_field() -> None:
    assert check_keys([{"argument": "q", "weight": 2}]) == (SearchKey(argument="q", weight=2),)
    for bad, field in (("q", "keys"), ([1], "keys.0"), ([{"argument": "q", "x": 1}], "keys.0.x")):
        with pytest.raises(InputError) as refused:
            check_keys(bad)
        assert refused.value.field == field
    assert check_recall({"top_k": 7}, RecallSettings(threshold=0.2)).threshold == 0.2
    with pytest.raises(InputError) as refused_mode:
        check_recall({"mode": "keywords"})
    assert refused_mode.value.field == "recall.mode"


def test_key_change_warning_lists_inheriting_agents() -> None:
    space = Space(
        project_id="p",
        space_id="s",
        name="s",
        kind="episodic",
        encrypted=False,
        keys=(SearchKey(argument="q"),),
        recall=RecallSettings(),
        agents={"triage": None, "billing": (SearchKey(argument="amount"),), "chat": None},
        embedder="e",
        dimensions=8,
        created_at=NOW,
        updated_at=NOW,
    )
    text, affected = key_change_warning(space, [SearchKey(argument="q", weight=2)])
    assert affected == ("chat", "triage")
    assert "chat, triage" in text
    assert "billing" in text
    assert "confirm=True" in text
    assert space.keys_for("billing") == (SearchKey(argument="amount"),)
    assert space.keys_for("triage") == space.keys_for(None) == space.keys
