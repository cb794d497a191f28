"""Memory spaces over real HTTP (SPEC H over G2, F3): the FastAPI service on a loopback
port, reached with :class:`HttpSpaces`, the sync :class:`Spaces` and raw requests; an
:class:`AsyncSpaces` on the same database is the reference every answer is compared with.
The ``mongomem spaces`` commands run as handlers and as a subprocess."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.cli.spaces import add_cli, spaces_command
from mongomem.errors import AuthError, InputError, ScopeError
from mongomem.sdk.spaces import HttpSpaces, Spaces
from mongomem.service import make_app, start_server
from mongomem.settings import EmbeddingSettings, LLMSettings, Settings
from mongomem.spaces import (
    AddAnyway,
    AsyncSpaces,
    Merge,
    RecallSettings,
    Replace,
    SearchKey,
)

pytestmark = pytest.mark.integration

EMBEDDER = HashingEmbedder(64)
KEY_A = "support-env-key-0123456789abcdef"
KEY_B = "other-env-key-0123456789abcdef"
CASES = [
    ("customer wants a refund for a damaged blender", "gold", "refund approved"),
    ("customer asks how to reset the router password", "basic", "sent the reset guide"),
    ("refund request for a late delivery of shoes", "basic", "voucher offered"),
]
KEYS: list[SearchKey | dict[str, Any]] = [
    SearchKey(argument="question", weight=3),
    {"argument": "tier"},
]


def with_keys(settings: Settings) -> Settings:
    keys = (SecretStr(f"support:{KEY_A}"), SecretStr(f"other:{KEY_B}"))
    return settings.model_copy(
        update={
            "service": settings.service.model_copy(update={"api_keys": keys}),
            "embedding": EmbeddingSettings(provider="stand-in", dimensions=64),
            "llm": LLMSettings(use_stand_in=True),
        }
    )


@pytest.fixture
async def url(settings: Settings, mongo: AsyncMongoClient[Document]) -> AsyncIterator[str]:
    runner = await start_server(make_app(with_keys(settings), embedder=EMBEDDER))
    try:
        yield runner.url
    finally:
        await runner.stop()


def opened(settings: Settings, mongo: AsyncMongoClient[Document], project: str) -> AsyncSpaces:
    return AsyncSpaces(settings, project_id=project, embedder=EMBEDDER, client=mongo)


@pytest.fixture
async def direct(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncSpaces]:
    async with opened(settings, mongo, "support") as s:
        yield s


@pytest.fixture
async def remote(url: str) -> AsyncIterator[HttpSpaces]:
    async with HttpSpaces(url, KEY_A) as s:
        yield s


async def send(
    url: str, method: str, path: str, key: str | None = KEY_A, **kw: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient() as client:
        return await client.request(method, f"{url}/v1/spaces{path}", headers=headers, **kw)


async def counts(mongo: AsyncMongoClient[Document], settings: Settings) -> tuple[int, int]:
    db = mongo[settings.mongodb.database]
    return await db["spaces"].count_documents({}), await db["space_items"].count_documents({})


async def seed(spaces: AsyncSpaces | HttpSpaces, space_id: str = "refunds") -> None:
    await spaces.create_space(space_id, keys=KEYS, recall=RecallSettings(threshold=0.1, top_k=3))
    for question, tier, outcome in CASES:
        added = await spaces.add_item(
            space_id,
            inputs={"question": question, "tier": tier},
            outcome=outcome,
            outputs={"reply": f"({outcome})"},
            comment="good call",
            sentiment="positive",
        )
        assert added.action == "added"


async def test_every_route_gives_the_direct_results(
    url: str, remote: HttpSpaces, direct: AsyncSpaces
) -> None:
    await seed(remote)
    assert await remote.get_space("refunds") == await direct.get_space("refunds")
    assert await remote.list_spaces() == await direct.list_spaces()
    assert (await remote.get_space("refunds")).item_count == 3

    query = {"question": "my blender arrived damaged, refund?", "tier": "gold"}
    hits = await remote.recall("refunds", query)
    assert hits == await direct.recall("refunds", query)
    assert hits[0].item.outcome == "refund approved"
    assert await remote.find_duplicates("refunds", query) == await direct.find_duplicates(
        "refunds", query
    )
    assert await remote.playground("refunds", query) == await direct.playground("refunds", query)

    # duplicates: nothing stored without a choice, then each choice
    again = {"question": CASES[0][0] + "!", "tier": "gold"}
    first = await remote.add_item("refunds", inputs=again, comment="fast", sentiment="positive")
    assert (first.action, first.item, len(first.duplicates)) == ("needs-choice", None, 1)
    assert len(await direct.list_items("refunds")) == 3
    merged = await remote.add_item(
        "refunds",
        inputs=again,
        comment="fast",
        sentiment="negative",
        on_duplicate=Merge(sentiment_wins="existing"),
    )
    assert merged.action == "merged"
    assert merged.item is not None
    stored = await direct.get_item("refunds", merged.item.item_id)  # times: to the ms
    assert (merged.item.item_id, merged.item.sentiment) == (stored.item_id, stored.sentiment)
    assert [f.comment for f in merged.item.feedback] == ["good call", "fast"]
    anyway = await remote.add_item("refunds", inputs=again, on_duplicate=AddAnyway())
    assert anyway.action == "added"
    assert anyway.item is not None
    replaced = await remote.add_item(
        "refunds",
        inputs=again,
        outcome="new",
        on_duplicate=Replace(item_ids=(anyway.item.item_id,)),
    )
    assert (replaced.action, replaced.removed) == ("replaced", (anyway.item.item_id,))
    with pytest.raises(InputError) as unknown:
        await remote.add_item("refunds", inputs=again, on_duplicate=Replace(item_ids=("item_x",)))
    assert unknown.value.field == "on_duplicate.item_ids"

    # items one by one, feedback
    items = await remote.list_items("refunds")
    assert items == await direct.list_items("refunds")
    item_id = items[0].item_id
    assert await remote.get_item("refunds", item_id) == await direct.get_item("refunds", item_id)
    edited = await remote.update_item("refunds", item_id, outcome=None, outputs={"reply": "ok"})
    assert (edited.outcome, edited.outputs) == (None, {"reply": "ok"})
    kept = await remote.update_item("refunds", item_id, outputs={"reply": "again"})
    assert kept.outcome is None  # an outcome not sent is left alone
    with pytest.raises(InputError) as immutable:
        await remote.update_item("refunds", item_id, inputs={"question": "other"})
    assert immutable.value.field == "inputs"
    noted = await remote.add_feedback(
        "refunds", item_id, comment="meh", sentiment="negative", by="reviewer"
    )
    assert [(f.comment, f.by) for f in noted.feedback] == [
        (f.comment, f.by) for f in (await direct.get_item("refunds", item_id)).feedback
    ]
    views = await remote.feedback("refunds")
    assert views == await direct.feedback("refunds")
    assert await remote.feedback("refunds", item_id=item_id) == await direct.feedback(
        "refunds", item_id=item_id
    )
    assert await remote.delete_item("refunds", item_id) is True
    assert await remote.delete_item("refunds", item_id) is False

    # feedback promoted from a run, one part of its output
    promoted = await remote.promote_feedback(
        "refunds",
        trace_id="trace-1",
        inputs={"question": "laptop screen cracked on arrival"},
        outputs={"reply": "Sorry!", "label": "damage"},
        comment="label was right",
        sentiment="positive",
        part="label",
    )
    assert promoted.action == "added"
    assert promoted.item is not None
    assert promoted.item.outputs == {"label": "damage"}
    assert promoted.item.source == {"trace_id": "trace-1", "part": "label"}

    # agents and key changes: 409 without confirm, nothing applied
    attached = await remote.attach_agent("refunds", "triage", keys=[{"argument": "question"}])
    assert attached == await direct.get_space("refunds")
    pending = await remote.update_space("refunds", name="Renamed", keys=[{"argument": "tier"}])
    assert (pending.applied, pending.affected_agents) == (False, ())
    assert pending.warning
    assert pending == await direct.update_space(
        "refunds", name="Renamed", keys=[{"argument": "tier"}]
    )
    raw = await send(url, "PATCH", "/refunds", json={"keys": [{"argument": "tier"}]})
    assert raw.status_code == 409
    assert raw.json()["error"]["type"] == "ConfirmationRequired"
    assert raw.json()["error"]["field"] == "confirm"
    assert raw.json()["result"]["applied"] is False
    assert (await direct.get_space("refunds")).name == "refunds"  # not even the name
    done = await remote.update_space(
        "refunds", name="Renamed", keys=[{"argument": "tier"}], confirm=True
    )
    assert done.applied
    assert done.space == await direct.get_space("refunds")
    assert [k.argument for k in done.space.keys] == ["tier"]
    detached = await remote.detach_agent("refunds", "triage")
    assert detached.agents == {}

    # escalations
    await remote.create_space(
        "esc", kind="escalation", keys=[{"argument": "question"}], recall={"threshold": 0.8}
    )
    resolved = await remote.resolve_escalation(
        "esc",
        inputs={"question": "Refund over 500 EUR for a damaged TV"},
        resolution="Approved by the lead",
        outcome="approve",
        resolved_by="lead",
    )
    assert await remote.get_item("esc", resolved.item_id) == await direct.get_item(
        "esc", resolved.item_id
    )
    assert (resolved.outcome, resolved.resolution) == ("approve", "Approved by the lead")
    ask = {"question": "Refund over 500 EUR for a damaged TV"}
    decision = await remote.check_escalation("esc", ask)
    assert (decision.apply, decision.outcome) == (True, "approve")
    assert decision == await direct.check_escalation("esc", ask)
    assert await remote.playground("esc", ask) == await direct.playground("esc", ask)
    with pytest.raises(InputError) as kind:
        await remote.recall("esc", ask)
    assert kind.value.field == "space_id"

    assert await remote.delete_space("esc") == 1
    assert [s.space_id for s in await direct.list_spaces()] == ["refunds"]


async def test_missing_spaces_and_items_answer_404_and_raise_the_direct_error(
    url: str, remote: HttpSpaces, direct: AsyncSpaces
) -> None:
    await direct.create_space("refunds", keys=KEYS)
    for path, field in (("/nope", "space_id"), ("/refunds/items/item_none", "item_id")):
        answer = await send(url, "GET", path)
        assert answer.status_code == 404
        assert (answer.json()["error"]["type"], answer.json()["error"]["field"]) == (
            "InputError",
            field,
        )
    with pytest.raises(InputError) as missing:
        await remote.get_space("nope")
    assert missing.value.field == "space_id"
    with pytest.raises(InputError) as no_item:
        await remote.get_item("refunds", "item_none")
    assert no_item.value.field == "item_id"


async def test_a_key_opens_its_own_project_only(
    url: str, settings: Settings, mongo: AsyncMongoClient[Document], direct: AsyncSpaces
) -> None:
    await seed(direct)  # project support: "refunds" with three cases
    async with opened(settings, mongo, "other") as other:
        await other.create_space("refunds", keys=KEYS, recall={"threshold": 0.1})
        await other.add_item("refunds", inputs={"question": "B's own case"}, outcome="b")
    a_item = (await direct.list_items("refunds"))[0].item_id
    before = await direct.list_items("refunds")

    async with HttpSpaces(url, KEY_B) as b:
        [space] = await b.list_spaces()
        assert (space.project_id, space.item_count) == ("other", 1)
        hits = await b.recall("refunds", {"question": "customer wants a refund for a blender"})
        assert {h.item.outcome for h in hits} <= {"b"}
        with pytest.raises(InputError):
            await b.get_item("refunds", a_item)  # A's item is not in B's space
        assert await b.delete_item("refunds", a_item) is False
        assert await b.delete_space("refunds") == 1  # B's own
    assert await direct.list_items("refunds") == before  # A's untouched
    assert (await direct.get_space("refunds")).item_count == 3

    # naming the other project in a body or query is refused, and stores nothing
    body = {"project_id": "support", "space_id": "sneaky", "keys": [{"argument": "q"}]}
    refused = await send(url, "POST", "", key=KEY_B, json=body)
    assert (refused.status_code, refused.json()["error"]["type"]) == (403, "ScopeError")
    answer = await send(url, "GET", "", key=KEY_B, params={"project_id": "support"})
    assert answer.status_code == 403
    assert [s.space_id for s in await direct.list_spaces()] == ["refunds"]
    async with HttpSpaces(url, KEY_A) as a:
        assert [s.space_id for s in await a.list_spaces()] == ["refunds"]

    for key, error in ((None, AuthError), ("wrong-key-0123456789", AuthError)):
        answer = await send(url, "GET", "", key=key)
        assert answer.status_code == 401
        assert answer.json()["error"]["type"] == error.__name__
    assert issubclass(AuthError, ScopeError)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "", {"space_id": "s", "keys": []}, "keys"),
        ("POST", "", {"keys": [{"argument": "q"}]}, "space_id"),
        ("POST", "", {"space_id": "$bad", "keys": [{"argument": "q"}]}, "space_id"),
        ("POST", "", {"space_id": "s", "keys": [{"argument": "q", "weight": 0}]}, "keys.0.weight"),
        (
            "POST",
            "",
            {"space_id": "s", "keys": [{"argument": "q"}], "recall": {"top_k": 0}},
            "recall.top_k",
        ),
        ("POST", "", {"space_id": "s", "keys": [{"argument": "q"}], "bogus": 1}, "bogus"),
        ("POST", "", "not json", "body"),
        ("POST", "", [1, 2], "body"),
        ("POST", "/refunds/items", {"inputs": {}}, "inputs"),
        ("POST", "/refunds/items", {"inputs": {"question": 3}}, "inputs.question"),
        (
            "POST",
            "/refunds/items",
            {"inputs": {"question": "q"}, "sentiment": "great"},
            "sentiment",
        ),
        (
            "POST",
            "/refunds/items",
            {"inputs": {"question": "q"}, "on_duplicate": {"choice": "x"}},
            "on_duplicate.choice",
        ),
        (
            "POST",
            "/refunds/items",
            {"inputs": {"question": {"name": "f.txt"}}},
            "inputs.question.text",
        ),
        ("POST", "/refunds/recall", {"agent_id": "a"}, "inputs"),
        ("PATCH", "/refunds", {"recall": {"threshold": 5}}, "recall.threshold"),
        ("PATCH", "/refunds", {"confirm": "yes"}, "confirm"),
        ("POST", "/import?encrypted=maybe", None, "encrypted"),
    ],
)
async def test_bad_input_answers_422_naming_the_field_and_stores_nothing(
    url: str,
    direct: AsyncSpaces,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    method: str,
    path: str,
    body: Any,
    field: str,
) -> None:
    await direct.create_space("refunds", keys=KEYS)
    before = await counts(mongo, settings)
    space = await direct.get_space("refunds")
    kw: dict[str, Any] = (
        {"content": body.encode()}
        if isinstance(body, str)
        else {"json": body}
        if body is not None
        else {"content": b'{"format": 1}\n'}
    )
    answer = await send(url, method, path, **kw)
    assert answer.status_code == (400 if field == "body" else 422), answer.text
    assert answer.json()["error"]["field"] == field
    assert await counts(mongo, settings) == before
    assert await direct.get_space("refunds") == space


async def test_export_over_http_then_import_over_http_round_trips(
    url: str,
    remote: HttpSpaces,
    direct: AsyncSpaces,
    mongo: AsyncMongoClient[Document],
    settings: Settings,
) -> None:
    await seed(direct)
    await direct.attach_agent("refunds", "triage", keys=[{"argument": "question"}])
    lines = await remote.export_space("refunds")
    assert lines == await direct.export_space("refunds")
    raw = await send(url, "GET", "/refunds/export")
    assert raw.headers["Content-Type"].startswith("application/x-ndjson")
    assert raw.text.splitlines() == lines

    before = await counts(mongo, settings)
    with pytest.raises(InputError) as truncated:
        await remote.import_space(lines[:-1], space_id="copy")
    assert truncated.value.field == "lines"
    assert await counts(mongo, settings) == before

    copy = await remote.import_space(lines, space_id="copy")
    assert (copy.space_id, copy.item_count, copy.project_id) == ("copy", 3, "support")
    assert copy.agents == (await direct.get_space("refunds")).agents
    async with HttpSpaces(url, KEY_B) as b:  # moving tenants: into project other
        moved = await b.import_space(lines)
        assert (moved.space_id, moved.project_id, moved.item_count) == ("refunds", "other", 3)
        query = {"question": "blender arrived damaged", "tier": "gold"}
        there = await b.recall("refunds", query)
        here = await direct.recall("refunds", query)
        assert [(h.item.outcome, h.score) for h in there] == [
            (h.item.outcome, h.score) for h in here
        ]
        with pytest.raises(InputError) as exists:
            await b.import_space(lines)
        assert exists.value.field == "space_id"
    again = await remote.export_space("copy")
    strip = [json.loads(x) for x in again[1:]]
    assert [x["item"]["outcome"] for x in strip] == [c[2] for c in CASES]


async def test_the_sync_spaces_directly_and_over_http(
    url: str, settings: Settings, direct: AsyncSpaces
) -> None:
    def work() -> tuple[list[str], list[str]]:
        with Spaces(base_url=url, api_key=KEY_A) as remote:
            remote.create_space("refunds", keys=KEYS, recall={"threshold": 0.1})
            for question, tier, outcome in CASES:
                remote.add_item(
                    "refunds", inputs={"question": question, "tier": tier}, outcome=outcome
                )
            over_http = [
                h.item.outcome or ""
                for h in remote.recall("refunds", {"question": "refund for my damaged blender"})
            ]
        with Spaces(project_id="support", settings=settings, embedder=EMBEDDER) as local:
            here = [
                h.item.outcome or ""
                for h in local.recall("refunds", {"question": "refund for my damaged blender"})
            ]
            assert local.export_space("refunds")[0].startswith('{"format"')
        return over_http, here

    over_http, here = await asyncio.to_thread(work)
    assert over_http == here
    assert over_http[0] == "refund approved"
    assert len(await direct.list_items("refunds")) == 3


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mongomem")
    add_cli(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


async def test_the_spaces_cli_handlers(
    direct: AsyncSpaces, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await seed(direct)
    run = asyncio.to_thread

    assert (
        await run(spaces_command, cli_args("spaces", "list", "--project-id", "support"), settings)
        == 0
    )
    listing = capsys.readouterr().out.splitlines()
    assert listing[1].split()[:4] == ["refunds", "episodic", "3", "no"]

    assert (
        await run(
            spaces_command,
            cli_args("spaces", "show", "refunds", "--project-id", "support"),
            settings,
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert (shown["space_id"], shown["item_count"]) == ("refunds", 3)

    assert (
        await run(
            spaces_command,
            cli_args("spaces", "export", "refunds", "--project-id", "support"),
            settings,
        )
        == 0
    )
    exported = capsys.readouterr().out
    assert exported.splitlines() == await direct.export_space("refunds")
    backup = tmp_path / "refunds.jsonl"
    backup.write_text(exported, encoding="utf-8")

    stand_in = settings.model_copy(
        update={"embedding": EmbeddingSettings(provider="stand-in", dimensions=64)}
    )
    args = cli_args(
        "spaces", "import", str(backup), "--project-id", "support", "--space-id", "copy"
    )
    assert await run(spaces_command, args, stand_in) == 0
    assert "imported space copy with 3 items" in capsys.readouterr().out
    assert (await direct.get_space("copy")).item_count == 3

    create = cli_args(
        "spaces",
        "create",
        "triage",
        "--project-id",
        "support",
        "--key",
        "question",
        "--key",
        "product=2.5",
        "--kind",
        "escalation",
        "--top-k",
        "5",
        "--description",
        "open questions",
    )
    assert await run(spaces_command, create, settings) == 0
    assert "created escalation space triage in project support" in capsys.readouterr().out
    made = await direct.get_space("triage")
    assert [(k.argument, k.weight) for k in made.keys] == [("question", 1.0), ("product", 2.5)]
    assert (made.kind, made.recall.top_k, made.description) == ("escalation", 5, "open questions")
    assert made.item_count == 0
    assert not made.encrypted
    again = cli_args("spaces", "create", "triage", "--project-id", "support", "--key", "q")
    with pytest.raises(InputError):  # the space exists: one line from the main CLI, exit 1
        await run(spaces_command, again, settings)
    with pytest.raises(SystemExit):  # a weight that is not a number: argparse says so
        cli_args("spaces", "create", "x", "--project-id", "support", "--key", "q=heavy")
    capsys.readouterr()
    assert (
        await run(
            spaces_command,
            cli_args("spaces", "delete", "triage", "--project-id", "support", "--yes"),
            settings,
        )
        == 0
    )
    capsys.readouterr()

    delete = ("spaces", "delete", "copy", "--project-id", "support")
    assert await run(spaces_command, cli_args(*delete), settings) == 2  # no --yes
    assert "add --yes" in capsys.readouterr().err
    assert await run(spaces_command, cli_args(*delete, "--yes"), settings) == 0
    assert "deleted space copy and 3 items" in capsys.readouterr().out
    assert [s.space_id for s in await direct.list_spaces()] == ["refunds"]


async def test_the_spaces_cli_as_a_process(
    direct: AsyncSpaces, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    await seed(direct)
    env = {
        **subprocess_env,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_EMBEDDING_DIMENSIONS": "64",
    }

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mongomem.cli", "spaces", *argv],  # `mongomem spaces`
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )

    exported = await asyncio.to_thread(cli, "export", "refunds", "--project-id", "support")
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert exported.stdout.splitlines() == await direct.export_space("refunds")
    backup = tmp_path / "refunds.jsonl"
    backup.write_text(exported.stdout, encoding="utf-8")
    imported = await asyncio.to_thread(cli, "import", str(backup), "--project-id", "other")
    assert imported.returncode == 0, imported.stderr[-2000:]
    missing = await asyncio.to_thread(cli, "show", "nope", "--project-id", "support")
    assert missing.returncode == 1
    assert "no space 'nope'" in missing.stderr
    listed = await asyncio.to_thread(cli, "list", "--project-id", "other")
    assert listed.stdout.splitlines()[1].split()[:3] == ["refunds", "episodic", "3"]
