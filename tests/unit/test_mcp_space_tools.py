"""The memory-space tools' mapping onto the spaces API, in process, over a recording double."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import pytest
from mcp import Client

from mongomem.errors import ConfigError, InputError
from mongomem.mcp_server import LazySpaces, McpServerConfig, build_server, launch
from mongomem.mcp_server.space_tools import READ_TOOLS, on_duplicate_from
from mongomem.models import utcnow
from mongomem.sdk import AsyncMemory
from mongomem.sdk.spaces import HttpSpaces, SpacesTransport
from mongomem.settings import load_settings
from mongomem.spaces import (
    AddAnyway,
    AddResult,
    AsyncSpaces,
    EscalationDecision,
    FileInput,
    Merge,
    OnDuplicate,
    PlaygroundResult,
    RecallHit,
    RecallSettings,
    Replace,
    Space,
    SpaceItem,
)
from mongomem.spaces.models import Sentiment

SPACE_TOOLS = {
    "list_spaces",
    "recall_cases",
    "add_case",
    "check_escalation",
    "resolve_escalation",
    "playground",
}


def _item(space_id: str = "refunds") -> SpaceItem:
    now = utcnow()
    return SpaceItem(
        item_id="item_1",
        space_id=space_id,
        kind="episodic",
        inputs={"question": "q"},
        key_texts={"question": "q"},
        outcome="refund approved",
        created_at=now,
        updated_at=now,
    )


class NoMemory:
    """A memory transport no test here reaches (the space tools do not use it)."""

    async def close(self) -> None:
        pass


class RecordingSpaces:
    """Keeps every call (name, positional, keyword); answers with fixed results."""

    def __init__(self, project_id: str | None = "proj") -> None:
        if project_id is not None:
            self.project_id = project_id
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.closed = 0

    async def list_spaces(self, *, limit: int | None = None, offset: int = 0) -> list[Space]:
        self.calls.append(("list_spaces", (), {}))
        now = utcnow()
        return [
            Space(
                project_id="proj",
                space_id="refunds",
                name="refunds",
                kind="episodic",
                encrypted=False,
                keys=(),
                recall=RecallSettings(),
                embedder="e",
                dimensions=4,
                created_at=now,
                updated_at=now,
            )
        ]

    async def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]:
        self.calls.append(("recall", (space_id, inputs), {"agent_id": agent_id}))
        hit = RecallHit(item=_item(), score=0.8, meaning=0.7, keyword=0.9, per_argument={})
        return [hit]

    async def add_item(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        outcome: str | None = None,
        comment: str = "",
        sentiment: Sentiment = "neutral",
        agent_id: str | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> AddResult:
        self.calls.append(
            (
                "add_item",
                (space_id,),
                {
                    "inputs": inputs,
                    "outputs": outputs,
                    "outcome": outcome,
                    "comment": comment,
                    "sentiment": sentiment,
                    "agent_id": agent_id,
                    "on_duplicate": on_duplicate,
                },
            )
        )
        if space_id == "missing":
            raise InputError("no space 'missing' in this project", field="space_id")
        return AddResult(action="added", item=_item(space_id))

    async def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision:
        self.calls.append(("check_escalation", (space_id, inputs), {"agent_id": agent_id}))
        return EscalationDecision(apply=False, outcome=None, top=None, threshold=0.8)

    async def resolve_escalation(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        resolution: str,
        outcome: str,
        agent_id: str | None = None,
        resolved_by: str | None = None,
    ) -> SpaceItem:
        self.calls.append(
            (
                "resolve_escalation",
                (space_id,),
                {
                    "inputs": inputs,
                    "resolution": resolution,
                    "outcome": outcome,
                    "agent_id": agent_id,
                    "resolved_by": resolved_by,
                },
            )
        )
        return _item(space_id)

    async def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult:
        self.calls.append(("playground", (space_id, inputs), {"agent_id": agent_id}))
        return PlaygroundResult(space_id=space_id, kind="episodic", matches=(), near_misses=())

    async def close(self) -> None:
        self.closed += 1


def _server(spaces: LazySpaces | None, **who: str) -> Client:
    memory = AsyncMemory(project_id="proj", transport=NoMemory())  # type: ignore[arg-type]
    config = McpServerConfig(project_id="proj", session_id="s", **who)
    return Client(build_server(memory, config, spaces=spaces))


@pytest.fixture
def spaces() -> RecordingSpaces:
    return RecordingSpaces()


@pytest.fixture
def client(spaces: RecordingSpaces) -> Client:
    return _server(LazySpaces(spaces), user_id="alice")  # type: ignore[arg-type]  # a partial double


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def _error(result: Any) -> str:
    assert result.is_error, _text(result)
    return _text(result)


def _ok(result: Any) -> Any:
    assert not result.is_error, _text(result)
    return result.structured_content


#: The calls the tools make: the derived reading tools' and the two written out.
TOOL_CALLS = {call for call, _ in READ_TOOLS.values()} | {"add_item", "resolve_escalation"}


@pytest.mark.parametrize("cls", [AsyncSpaces, HttpSpaces, RecordingSpaces])
def test_the_spaces_clients_fit_the_protocol(cls: type) -> None:
    """What the tools call is the SpacesTransport's: AsyncSpaces, HttpSpaces and the
    double offer it with the protocol's parameters."""
    assert set(READ_TOOLS) | {"add_case", "resolve_escalation"} == SPACE_TOOLS
    for name in TOOL_CALLS | {"close"}:
        assert list(inspect.signature(getattr(cls, name)).parameters) == list(
            inspect.signature(getattr(SpacesTransport, name)).parameters
        ), name


async def test_space_tools_are_listed_only_with_spaces_and_take_no_identity(
    client: Client,
) -> None:
    async with _server(None, user_id="alice") as plain:
        without = {t.name for t in (await plain.list_tools()).tools}
    async with client:
        tools = (await client.list_tools()).tools
    assert without.isdisjoint(SPACE_TOOLS)
    assert {t.name for t in tools} == without | SPACE_TOOLS
    for tool in tools:
        props = set(tool.input_schema.get("properties", {}))
        assert not props & {"project_id", "user_id", "agent_id", "resolved_by"}, tool.name
        assert tool.description, tool.name
    add = next(t for t in tools if t.name == "add_case")
    assert add.input_schema["required"] == ["space", "inputs"]


async def test_reads_map_onto_the_api_with_the_caller_as_agent(
    client: Client, spaces: RecordingSpaces
) -> None:
    inputs = {"question": "blender broke"}
    async with client:
        listed = _ok(await client.call_tool("list_spaces", {}))["result"]
        hits = _ok(await client.call_tool("recall_cases", {"space": "refunds", "inputs": inputs}))
        decision = _ok(
            await client.call_tool("check_escalation", {"space": "esc", "inputs": inputs})
        )
        sim = _ok(await client.call_tool("playground", {"space": "refunds", "inputs": inputs}))
    assert [s["space_id"] for s in listed] == ["refunds"]
    assert hits["result"][0]["score"] == 0.8
    assert hits["result"][0]["item"]["outcome"] == "refund approved"
    assert decision["apply"] is False
    assert sim["space_id"] == "refunds"
    assert spaces.calls == [
        ("list_spaces", (), {}),
        ("recall", ("refunds", inputs), {"agent_id": "alice"}),
        ("check_escalation", ("esc", inputs), {"agent_id": "alice"}),
        ("playground", ("refunds", inputs), {"agent_id": "alice"}),
    ]


async def test_add_case_maps_every_argument_and_the_duplicate_choices(
    client: Client, spaces: RecordingSpaces
) -> None:
    base = {"space": "refunds", "inputs": {"question": "q"}}
    async with client:
        _ok(
            await client.call_tool(
                "add_case",
                {
                    **base,
                    "outputs": {"reply": "ok"},
                    "outcome": "approved",
                    "comment": "good",
                    "sentiment": "positive",
                },
            )
        )
        _ok(await client.call_tool("add_case", {**base, "on_duplicate": "add-anyway"}))
        _ok(
            await client.call_tool(
                "add_case", {**base, "on_duplicate": "replace", "replace_ids": ["item_1", "item_2"]}
            )
        )
        _ok(await client.call_tool("add_case", {**base, "on_duplicate": "merge"}))
        _ok(
            await client.call_tool(
                "add_case", {**base, "on_duplicate": "merge", "sentiment_wins": "new"}
            )
        )
    first = spaces.calls[0][2]
    assert first == {
        "inputs": {"question": "q"},
        "outputs": {"reply": "ok"},
        "outcome": "approved",
        "comment": "good",
        "sentiment": "positive",
        "agent_id": "alice",
        "on_duplicate": None,
    }
    assert [c[2]["on_duplicate"] for c in spaces.calls[1:]] == [
        AddAnyway(),
        Replace(item_ids=("item_1", "item_2")),
        Merge(),
        Merge(sentiment_wins="new"),
    ]


async def test_a_file_input_reaches_the_api_as_a_file(
    client: Client, spaces: RecordingSpaces
) -> None:
    inputs = {"question": "see file", "invoice": {"name": "inv.txt", "text": "Total 500 EUR"}}
    async with client:
        _ok(await client.call_tool("recall_cases", {"space": "refunds", "inputs": inputs}))
    sent = spaces.calls[0][1][1]
    assert sent == {
        "question": "see file",
        "invoice": FileInput(name="inv.txt", text="Total 500 EUR"),
    }


async def test_resolve_escalation_records_the_caller_as_resolver(
    spaces: RecordingSpaces,
) -> None:
    async with _server(LazySpaces(spaces), service_account="bot") as client:  # type: ignore[arg-type]  # a partial double
        _ok(
            await client.call_tool(
                "resolve_escalation",
                {
                    "space": "esc",
                    "inputs": {"question": "q"},
                    "resolution": "lead approved",
                    "outcome": "approve",
                },
            )
        )
    assert spaces.calls == [
        (
            "resolve_escalation",
            ("esc",),
            {
                "inputs": {"question": "q"},
                "resolution": "lead approved",
                "outcome": "approve",
                "agent_id": "sa:bot",
                "resolved_by": "sa:bot",
            },
        )
    ]


async def test_bad_arguments_name_the_argument_and_reach_nothing(
    client: Client, spaces: RecordingSpaces
) -> None:
    base = {"space": "refunds", "inputs": {"question": "q"}}
    async with client:
        no_ids = await client.call_tool("add_case", {**base, "on_duplicate": "replace"})
        empty_ids = await client.call_tool(
            "add_case", {**base, "on_duplicate": "replace", "replace_ids": []}
        )
        stray_ids = await client.call_tool("add_case", {**base, "replace_ids": ["item_1"]})
        stray_wins = await client.call_tool(
            "add_case", {**base, "on_duplicate": "add-anyway", "sentiment_wins": "new"}
        )
        bad_choice = await client.call_tool("add_case", {**base, "on_duplicate": "keep-both"})
        bad_mood = await client.call_tool("add_case", {**base, "sentiment": "angry"})
        no_inputs = await client.call_tool("recall_cases", {"space": "refunds"})
        bad_value = await client.call_tool(
            "recall_cases", {"space": "refunds", "inputs": {"question": 3}}
        )
        agent = await client.call_tool("recall_cases", {**base, "agent_id": "other"})
        project = await client.call_tool("list_spaces", {"project_id": "other"})
    assert "invalid input (replace_ids)" in _error(no_ids)
    assert "invalid input (replace_ids)" in _error(empty_ids)
    assert "invalid input (replace_ids)" in _error(stray_ids)
    assert "invalid input (sentiment_wins)" in _error(stray_wins)
    assert "on_duplicate" in _error(bad_choice)
    assert "sentiment" in _error(bad_mood)
    assert "inputs" in _error(no_inputs)
    assert "inputs" in _error(bad_value)
    assert "unknown argument 'agent_id'" in _error(agent)
    assert "unknown argument 'project_id'" in _error(project)
    assert spaces.calls == [], "a refused call reached the spaces"


async def test_the_api_errors_name_the_tool_argument(
    client: Client, spaces: RecordingSpaces
) -> None:
    async with client:
        missing = await client.call_tool("add_case", {"space": "missing", "inputs": {"q": "x"}})
    assert "invalid input (space): no space 'missing'" in _error(missing)


def test_on_duplicate_from_names_the_argument() -> None:
    assert on_duplicate_from(None) is None
    with pytest.raises(InputError) as too_many:
        on_duplicate_from("replace", ["x"] * 101)
    assert too_many.value.field == "on_duplicate.item_ids"  # shown as replace_ids


async def test_spaces_are_made_on_first_use_and_closed_once() -> None:
    made: list[RecordingSpaces] = []

    def make() -> RecordingSpaces:
        made.append(RecordingSpaces())
        return made[-1]

    lazy = LazySpaces(make)  # type: ignore[arg-type]  # a partial double
    async with _server(lazy, user_id="alice") as client:
        _ok(await client.call_tool("whoami", {}))
        await client.list_tools()
        assert made == []
        assert not lazy.opened
        _ok(await client.call_tool("list_spaces", {}))
        _ok(await client.call_tool("list_spaces", {}))
    assert len(made) == 1
    await lazy.close()
    await lazy.close()
    assert made[0].closed == 1
    assert not lazy.opened


async def test_spaces_of_another_project_are_refused() -> None:
    other = RecordingSpaces(project_id="other")
    async with _server(LazySpaces(other), user_id="alice") as client:  # type: ignore[arg-type]  # a partial double
        result = await client.call_tool("list_spaces", {})
    assert "ConfigError" in _error(result)
    assert "'other'" in _error(result)
    assert other.calls == []
    unnamed = RecordingSpaces(project_id=None)  # over HTTP the API key decides the project
    async with _server(LazySpaces(unnamed), user_id="alice") as client:  # type: ignore[arg-type]  # a partial double
        _ok(await client.call_tool("list_spaces", {}))


async def test_serve_closes_the_spaces_when_the_server_stops(
    spaces: RecordingSpaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    class StoppingServer:
        async def run_stdio_async(self) -> None:
            raise RuntimeError("the client went away")

    built: list[LazySpaces | None] = []

    def build(memory: AsyncMemory, config: McpServerConfig, *, spaces: LazySpaces) -> Any:
        built.append(spaces)
        return StoppingServer()

    monkeypatch.setattr(launch, "build_server", build)
    config = McpServerConfig(project_id="proj", user_id="alice")
    with pytest.raises(RuntimeError):
        await launch.serve(load_settings(), config, transport=NoMemory(), spaces=spaces)  # type: ignore[arg-type]
    assert spaces.closed == 1
    assert built[0] is not None
    with pytest.raises(ConfigError, match="stopped"):
        await built[0].get()
