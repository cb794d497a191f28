"""Memory spaces through the MCP server: a real stdio subprocess, driven by the official
``mcp`` client, on the real MongoDB-compatible server (SPEC G3, H)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp_stdio import error, ok, stdio_server
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import TURNS, Document
from mongomem.settings import Settings
from mongomem.spaces import AsyncSpaces

pytestmark = pytest.mark.integration

PROJECT = "support"
DIMENSIONS = 64

BLENDER = {"question": "Refund for a blender that arrived broken", "tier": "gold"}
#: Close enough to BLENDER to be a near-duplicate (the space's duplicate_threshold).
BLENDER_AGAIN = {"question": "Refund for a blender that arrived broken!", "tier": "gold"}
ROUTER = {"question": "How do I reset the password of my router", "tier": "basic"}
TV = {"question": "Refund over 500 EUR for a damaged TV"}


@pytest.fixture
def env(subprocess_env: dict[str, str]) -> dict[str, str]:
    return {
        **subprocess_env,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": str(DIMENSIONS),
    }


def project_spaces(
    settings: Settings, mongo: AsyncMongoClient[Document], project: str = PROJECT
) -> AsyncSpaces:
    """The spaces API on the same database, embedding as the subprocess does."""
    return AsyncSpaces(
        settings, project_id=project, embedder=HashingEmbedder(DIMENSIONS), client=mongo
    )


@pytest.fixture
async def spaces(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncSpaces]:
    async with project_spaces(settings, mongo) as s:
        await s.create_space(
            "refunds",
            keys=[{"argument": "question", "weight": 2}, {"argument": "tier"}],
            recall={"threshold": 0.3, "top_k": 3},
        )
        await s.create_space(
            "escalations",
            kind="escalation",
            keys=[{"argument": "question"}],
            recall={"threshold": 0.8},
        )
        yield s


async def test_add_recall_and_duplicates_through_mcp(
    env: dict[str, str], spaces: AsyncSpaces
) -> None:
    case = {
        "space": "refunds",
        "inputs": BLENDER,
        "outputs": {"reply": "Refund approved."},
        "outcome": "refund approved",
        "comment": "Right call",
        "sentiment": "positive",
    }
    async with stdio_server(env, PROJECT, "--user-id", "alice") as client:
        listed = ok(await client.call_tool("list_spaces", {}))["result"]
        assert [(s["space_id"], s["kind"]) for s in listed] == [
            ("escalations", "escalation"),
            ("refunds", "episodic"),
        ]
        added = ok(await client.call_tool("add_case", case))
        assert added["action"] == "added"
        first = added["item"]["item_id"]
        assert added["item"]["agent_id"] == "alice"
        assert added["item"]["feedback"][0]["by"] == "alice"
        ok(
            await client.call_tool(
                "add_case",
                {"space": "refunds", "inputs": ROUTER, "outcome": "sent the reset guide"},
            )
        )

        asked = {"question": "my blender came broken, can I get a refund", "tier": "gold"}
        hits = ok(await client.call_tool("recall_cases", {"space": "refunds", "inputs": asked}))
        hits = hits["result"]
        assert hits[0]["item"]["item_id"] == first
        assert hits[0]["item"]["outcome"] == "refund approved"
        assert 0.3 <= hits[0]["score"] <= 1.0
        assert all(h["score"] <= hits[0]["score"] for h in hits)

        # A near-duplicate without a choice: the duplicates come back, nothing is stored.
        again = {
            "space": "refunds",
            "inputs": BLENDER_AGAIN,
            "comment": "Fast and friendly",
            "sentiment": "positive",
        }
        choice = ok(await client.call_tool("add_case", again))
        assert choice["action"] == "needs-choice"
        assert choice["item"] is None
        assert [d["item"]["item_id"] for d in choice["duplicates"]] == [first]
        assert len(await spaces.list_items("refunds")) == 2

        merged = ok(await client.call_tool("add_case", {**again, "on_duplicate": "merge"}))
        assert (merged["action"], merged["item"]["item_id"]) == ("merged", first)
        replaced = ok(
            await client.call_tool(
                "add_case", {**again, "on_duplicate": "replace", "replace_ids": [first]}
            )
        )
        assert replaced["action"] == "replaced"
        assert replaced["removed"] == [first]

        sim = ok(await client.call_tool("playground", {"space": "refunds", "inputs": asked}))
        assert sim["matches"][0]["item"]["item_id"] == replaced["item"]["item_id"]

    stored = {i.item_id: i for i in await spaces.list_items("refunds")}
    assert first not in stored
    assert len(stored) == 2
    kept = stored[replaced["item"]["item_id"]]
    assert (kept.inputs, kept.agent_id) == (BLENDER_AGAIN, "alice")


async def test_a_resolved_escalation_is_applied_next_time(
    env: dict[str, str], spaces: AsyncSpaces
) -> None:
    check = {"space": "escalations", "inputs": TV}
    async with stdio_server(env, PROJECT, "--service-account", "support-bot") as client:
        before = ok(await client.call_tool("check_escalation", check))
        assert (before["apply"], before["outcome"], before["top"]) == (False, None, None)

        resolved = ok(
            await client.call_tool(
                "resolve_escalation",
                {
                    **check,
                    "resolution": "Approved by the team lead: transport damage.",
                    "outcome": "approve",
                },
            )
        )
        assert resolved["agent_id"] == "sa:support-bot"
        assert resolved["source"] == {"resolved_by": "sa:support-bot"}

        after = ok(await client.call_tool("check_escalation", check))
        assert (after["apply"], after["outcome"]) == (True, "approve")
        assert after["top"]["item"]["item_id"] == resolved["item_id"]
        assert after["top"]["score"] >= after["threshold"] == 0.8

        moved = {"question": "Customer wants to change the delivery address"}
        other = ok(await client.call_tool("check_escalation", {**check, "inputs": moved}))
        assert (other["apply"], other["outcome"]) == (False, None)

        sim = ok(await client.call_tool("playground", check))
        assert sim["escalation"]["apply"] is True
    assert [i.resolution for i in await spaces.list_items("escalations")] == [
        "Approved by the team lead: transport damage."
    ]


async def test_bad_input_names_the_argument_and_stores_nothing(
    env: dict[str, str], spaces: AsyncSpaces
) -> None:
    seeded = await spaces.add_item("refunds", inputs=BLENDER, sentiment="positive", comment="ok")
    assert seeded.item is not None
    base = {"space": "refunds", "inputs": BLENDER_AGAIN}
    async with stdio_server(env, PROJECT, "--user-id", "alice") as client:
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("add_case", {**base, "space": "nope"}, "invalid input (space)"),
            ("add_case", {**base, "space": "escalations"}, "invalid input (space)"),
            ("add_case", {**base, "inputs": {"colour": "red"}}, "invalid input (inputs)"),
            ("add_case", {**base, "inputs": {"question": "  "}}, "invalid input (inputs.question)"),
            ("add_case", {**base, "on_duplicate": "replace"}, "invalid input (replace_ids)"),
            (
                "add_case",
                {**base, "on_duplicate": "replace", "replace_ids": ["item_nope"]},
                "invalid input (replace_ids)",
            ),
            (
                "add_case",
                {**base, "sentiment": "negative", "on_duplicate": "merge"},
                "invalid input (sentiment_wins)",
            ),
            ("add_case", {**base, "sentiment": "furious"}, "sentiment"),
            ("recall_cases", {"space": "refunds", "inputs": {}}, "invalid input (inputs)"),
            (
                "resolve_escalation",
                {"space": "escalations", "inputs": TV, "resolution": "r", "outcome": " "},
                "invalid input (outcome)",
            ),
            ("add_case", {**base, "agent_id": "mallory"}, "unknown argument 'agent_id'"),
        ]
        for tool, arguments, expected in calls:
            assert expected in error(await client.call_tool(tool, arguments)), (tool, arguments)
        # The server keeps serving after bad input.
        assert len(ok(await client.call_tool("list_spaces", {}))["result"]) == 2

    items = await spaces.list_items("refunds")
    assert [(i.item_id, len(i.feedback)) for i in items] == [(seeded.item.item_id, 1)]
    assert await spaces.list_items("escalations") == []


async def test_a_server_of_one_project_never_sees_another_projects_space(
    env: dict[str, str],
    spaces: AsyncSpaces,
    settings: Settings,
    mongo: AsyncMongoClient[Document],
) -> None:
    async with project_spaces(settings, mongo, "other") as other:
        await other.create_space(
            "refunds", keys=[{"argument": "question"}], recall={"threshold": 0.0}
        )
        await other.create_space("secret", keys=[{"argument": "question"}])
        theirs = await other.add_item("refunds", inputs=BLENDER, outcome="their outcome")
        assert theirs.item is not None

        async with stdio_server(env, PROJECT, "--user-id", "alice") as client:
            listed = ok(await client.call_tool("list_spaces", {}))["result"]
            assert {(s["project_id"], s["space_id"], s["item_count"]) for s in listed} == {
                (PROJECT, "escalations", 0),
                (PROJECT, "refunds", 0),
            }
            same_id = {"space": "refunds", "inputs": BLENDER}
            assert ok(await client.call_tool("recall_cases", same_id))["result"] == []
            sim = ok(await client.call_tool("playground", same_id))
            assert (sim["matches"], sim["near_misses"]) == ([], [])
            missing = await client.call_tool("recall_cases", {**same_id, "space": "secret"})
            assert "invalid input (space): no space 'secret'" in error(missing)
            theirs_ids = {"on_duplicate": "replace", "replace_ids": [theirs.item.item_id]}
            replace = await client.call_tool("add_case", {**same_id, **theirs_ids})
            assert "invalid input (replace_ids)" in error(replace)
            named = await client.call_tool("list_spaces", {"project_id": "other"})
            assert "unknown argument 'project_id'" in error(named)
            mine = ok(await client.call_tool("add_case", {**same_id, "outcome": "ours"}))
            assert mine["action"] == "added"

        kept = await other.list_items("refunds")
        assert [(i.item_id, i.outcome) for i in kept] == [(theirs.item.item_id, "their outcome")]
    assert [i.outcome for i in await spaces.list_items("refunds")] == ["ours"]


async def test_spaces_are_opened_only_when_a_spaces_tool_is_used(
    env: dict[str, str], settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = mongo[settings.mongodb.database]
    async with stdio_server(env, PROJECT, "--user-id", "alice") as client:
        ok(await client.call_tool("record_turn", {"role": "user", "content": "hello"}))
        assert "list_spaces" in {t.name for t in (await client.list_tools()).tools}
        names = set(await db.list_collection_names())
        assert TURNS in names, "the memory tools did reach MongoDB"
        assert not names & {"spaces", "space_items"}, "spaces were set up before any spaces call"
        assert ok(await client.call_tool("list_spaces", {}))["result"] == []
        assert {"spaces", "space_items"} <= set(await db.list_collection_names())
