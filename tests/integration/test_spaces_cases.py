"""Space items against the real MongoDB-compatible server: duplicates (H4), escalations
(H7), the playground (H8), promoted feedback (H3), search keys per agent (H6) and the
known limits (H10)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.errors import InputError
from mongomem.settings import Settings
from mongomem.spaces import INPUTS_IMMUTABLE, AddAnyway, AsyncSpaces, Merge, Replace

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder(64)
BLENDER = {"question": "customer wants a refund for a damaged blender", "tier": "gold"}
BLENDER_AGAIN = {"question": "customer wants a refund for a damaged blender!", "tier": "gold"}
ROUTER = {"question": "how do I reset the router password", "tier": "basic"}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 3, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def spaces(
    settings: Settings, mongo: AsyncMongoClient[Document], clock: Clock
) -> AsyncIterator[AsyncSpaces]:
    async with AsyncSpaces(
        settings, project_id="support", embedder=EMBEDDER, client=mongo, clock=clock
    ) as s:
        await s.create_space(
            "cases",
            keys=[{"argument": "question", "weight": 2}, {"argument": "tier"}],
            recall={"threshold": 0.3},
        )
        await s.create_space(
            "escalations",
            kind="escalation",
            keys=[{"argument": "question"}],
            recall={"threshold": 0.8},
        )
        yield s


async def item_count(mongo: AsyncMongoClient[Document], settings: Settings) -> int:
    return await mongo[settings.mongodb.database]["space_items"].count_documents({})


async def test_duplicates_need_a_choice(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    first = await spaces.add_item(
        "cases", inputs=BLENDER, outcome="refund", comment="fast", sentiment="positive"
    )
    assert first.action == "added"
    assert first.item is not None
    assert (await spaces.add_item("cases", inputs=ROUTER, outcome="guide")).action == "added"

    found = await spaces.find_duplicates("cases", BLENDER_AGAIN)
    assert [d.item.item_id for d in found] == [first.item.item_id]
    offered = await spaces.add_item("cases", inputs=BLENDER_AGAIN, outcome="refund again")
    assert offered.action == "needs-choice"
    assert offered.item is None
    assert [d.item.item_id for d in offered.duplicates] == [first.item.item_id]
    assert offered.duplicates[0].score >= 0.9
    assert await item_count(mongo, settings) == 2  # nothing stored

    anyway = await spaces.add_item("cases", inputs=BLENDER_AGAIN, on_duplicate=AddAnyway())
    assert anyway.action == "added"
    assert await item_count(mongo, settings) == 3
    assert anyway.item is not None

    replaced = await spaces.add_item(
        "cases",
        inputs=BLENDER,
        outcome="store credit",
        on_duplicate=Replace(item_ids=(first.item.item_id, anyway.item.item_id)),
    )
    assert replaced.action == "replaced"
    assert set(replaced.removed) == {first.item.item_id, anyway.item.item_id}
    outcomes = sorted(i.outcome or "" for i in await spaces.list_items("cases"))
    assert outcomes == ["guide", "store credit"]

    with pytest.raises(InputError) as unknown:
        await spaces.add_item(
            "cases", inputs=BLENDER, on_duplicate=Replace(item_ids=("item_nope",))
        )
    assert unknown.value.field == "on_duplicate.item_ids"
    assert await item_count(mongo, settings) == 2


async def test_merge_keeps_the_closest_and_asks_which_sentiment_wins(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    kept = await spaces.add_item(
        "cases", inputs=BLENDER, outcome="refund", comment="fast", sentiment="positive"
    )
    assert kept.item is not None
    with pytest.raises(InputError) as refused:
        await spaces.add_item(
            "cases",
            inputs=BLENDER_AGAIN,
            comment="too slow",
            sentiment="negative",
            on_duplicate=Merge(),
        )
    assert refused.value.field == "on_duplicate.sentiment_wins"
    assert (await spaces.get_item("cases", kept.item.item_id)) == kept.item  # unchanged

    merged = await spaces.add_item(
        "cases",
        inputs=BLENDER_AGAIN,
        outcome="ignored",
        comment="too slow",
        sentiment="negative",
        on_duplicate=Merge(sentiment_wins="new"),
    )
    assert merged.action == "merged"
    stored = await spaces.get_item("cases", kept.item.item_id)
    assert stored.inputs == BLENDER
    assert stored.outcome == "refund"
    assert [f.comment for f in stored.feedback] == ["fast", "too slow"]
    assert stored.sentiment == "negative"
    assert await item_count(mongo, settings) == 1

    # With nothing to merge into, Merge simply adds.
    assert (await spaces.add_item("cases", inputs=ROUTER, on_duplicate=Merge())).action == "added"


async def test_escalation_applies_only_a_clear_top_match(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    before = await spaces.check_escalation("escalations", {"question": "refund over 500 euros"})
    assert not before.apply
    assert before.top is None

    item = await spaces.resolve_escalation(
        "escalations",
        inputs={"question": "refund over 500 euros for a damaged TV"},
        resolution="Manager approved: the TV arrived broken.",
        outcome="approve",
        resolved_by="manager_1",
    )
    await spaces.resolve_escalation(
        "escalations",
        inputs={"question": "customer wants to cancel a contract early"},
        resolution="Cancellation fee waived once.",
        outcome="waive fee",
    )
    same = await spaces.check_escalation(
        "escalations", {"question": "refund over 500 euros for a damaged TV"}
    )
    assert same.apply
    assert same.outcome == "approve"
    assert same.top is not None
    assert same.top.item.item_id == item.item_id
    assert same.top.item.resolution == "Manager approved: the TV arrived broken."
    assert same.top.item.source == {"resolved_by": "manager_1"}

    different = await spaces.check_escalation("escalations", {"question": "lost parcel in Oslo"})
    assert not different.apply
    assert different.outcome is None
    assert different.top is not None  # still only the top one, for the record
    assert different.top.score < 0.8

    for bad, field in (({"outcome": " "}, "outcome"), ({"inputs": {}}, "inputs")):
        kwargs = {"inputs": {"question": "x"}, "resolution": "r", "outcome": "o", **bad}
        with pytest.raises(InputError) as refused:
            await spaces.resolve_escalation("escalations", **kwargs)  # type: ignore[arg-type]
        assert refused.value.field == field
    with pytest.raises(InputError) as wrong_kind:
        await spaces.add_item("escalations", inputs={"question": "x"})
    assert wrong_kind.value.field == "space_id"
    assert await item_count(mongo, settings) == 2


async def test_playground_simulates_without_writing(
    spaces: AsyncSpaces, mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    await spaces.add_item("cases", inputs=BLENDER, outcome="refund")
    await spaces.add_item("cases", inputs=ROUTER, outcome="guide")
    episodic = await spaces.playground("cases", BLENDER_AGAIN)
    assert episodic.kind == "episodic"
    assert [m.item.outcome for m in episodic.matches] == ["refund"]
    assert [m.item.outcome for m in episodic.near_misses] == ["guide"]
    assert episodic.near_misses[0].score < 0.3 <= episodic.matches[0].score
    assert episodic.escalation is None

    await spaces.resolve_escalation(
        "escalations",
        inputs={"question": "refund over 500 euros"},
        resolution="ok",
        outcome="approve",
    )
    applied = await spaces.playground("escalations", {"question": "refund over 500 euros"})
    assert applied.escalation is not None
    assert applied.escalation.apply
    assert [m.item.outcome for m in applied.matches] == ["approve"]
    raised = await spaces.playground("escalations", {"question": "lost parcel"})
    assert raised.escalation is not None
    assert not raised.escalation.apply
    assert raised.matches == ()
    assert len(raised.near_misses) == 1
    assert await item_count(mongo, settings) == 3


async def test_promote_feedback_on_a_run_or_a_part(spaces: AsyncSpaces) -> None:
    outputs = {"reply": "We will refund you.", "tags": ["refund"], "summary": "refund"}
    whole = await spaces.promote_feedback(
        "cases",
        trace_id="trace-1",
        inputs=BLENDER,
        outputs=outputs,
        comment="right call",
        sentiment="positive",
        agent_id="triage",
    )
    assert whole.item is not None
    assert whole.item.outputs == outputs
    assert whole.item.source == {"trace_id": "trace-1"}
    part = await spaces.promote_feedback(
        "cases",
        trace_id="trace-2",
        inputs=ROUTER,
        outputs=outputs,
        part="reply",
        comment="wrong tone",
        sentiment="negative",
    )
    assert part.item is not None
    stored = await spaces.get_item("cases", part.item.item_id)
    assert stored.outputs == {"reply": "We will refund you."}
    assert stored.source == {"trace_id": "trace-2", "part": "reply"}
    assert stored.sentiment == "negative"
    for kwargs, field in (({"part": "nope"}, "part"), ({"trace_id": ""}, "trace_id")):
        args = {
            "trace_id": "t",
            "inputs": ROUTER,
            "outputs": outputs,
            "comment": "c",
            "sentiment": "positive",
            **kwargs,
        }
        with pytest.raises(InputError) as refused:
            await spaces.promote_feedback("cases", **args)  # type: ignore[arg-type]
        assert refused.value.field == field
    assert len(await spaces.list_items("cases")) == 2


async def test_agents_inherit_or_override_keys_and_key_changes_warn(spaces: AsyncSpaces) -> None:
    await spaces.attach_agent("cases", "triage")
    await spaces.attach_agent("cases", "chat")
    space = await spaces.attach_agent("cases", "billing", keys=[{"argument": "tier"}])
    assert space.agents["billing"] is not None
    await spaces.add_item("cases", inputs=BLENDER, outcome="refund")
    await spaces.add_item("cases", inputs=ROUTER, outcome="guide")

    # The override is used: billing matches on the tier only.
    query = {"question": "how do I reset the router password", "tier": "gold"}
    assert (await spaces.recall("cases", query))[0].item.outcome == "guide"
    billing = await spaces.recall("cases", query, agent_id="billing")
    assert billing[0].item.outcome == "refund"
    assert set(billing[0].per_argument) == {"tier"}

    warned = await spaces.update_space("cases", keys=[{"argument": "question"}], name="renamed too")
    assert not warned.applied
    assert warned.affected_agents == ("chat", "triage")
    assert warned.warning is not None
    assert "billing" in warned.warning
    unchanged = await spaces.get_space("cases")
    assert unchanged.name == "cases"
    assert [k.weight for k in unchanged.keys] == [2.0, 1.0]

    done = await spaces.update_space("cases", keys=[{"argument": "question"}], confirm=True)
    assert done.applied
    assert done.affected_agents == ("chat", "triage")
    assert [k.argument for k in done.space.keys] == ["question"]
    same = await spaces.update_space("cases", keys=[{"argument": "question"}])
    assert same.applied
    assert same.warning is None

    after = await spaces.detach_agent("cases", "chat")
    assert set(after.agents) == {"triage", "billing"}
    with pytest.raises(InputError) as not_there:
        await spaces.detach_agent("cases", "chat")
    assert not_there.value.field == "agent_id"


async def test_inputs_cannot_be_edited_and_feedback_shows_30_days(
    spaces: AsyncSpaces, clock: Clock
) -> None:
    added = await spaces.add_item(
        "cases", inputs=BLENDER, outcome="refund", comment="first", sentiment="positive"
    )
    assert added.item is not None
    item_id = added.item.item_id
    with pytest.raises(InputError) as refused:
        await spaces.update_item("cases", item_id, inputs={"question": "new"})
    assert refused.value.field == "inputs"
    assert str(refused.value) == INPUTS_IMMUTABLE
    edited = await spaces.update_item("cases", item_id, outputs={"reply": "ok"}, outcome="credit")
    assert (edited.outputs, edited.outcome, edited.inputs) == ({"reply": "ok"}, "credit", BLENDER)

    clock.now += timedelta(days=20)
    await spaces.add_feedback("cases", item_id, comment="second", sentiment="negative", by="u1")
    clock.now += timedelta(days=15)  # "first" is now 35 days old, "second" 15
    assert [v.comment for v in await spaces.feedback("cases")] == ["second"]
    assert [v.comment for v in await spaces.feedback("cases", item_id=item_id)] == ["second"]
    kept = await spaces.get_item("cases", item_id)
    assert [f.comment for f in kept.feedback] == ["first", "second"]  # older kept
    assert kept.sentiment == "negative"

    assert await spaces.delete_item("cases", item_id)
    assert not await spaces.delete_item("cases", item_id)
    with pytest.raises(InputError) as gone:
        await spaces.get_item("cases", item_id)
    assert gone.value.field == "item_id"
