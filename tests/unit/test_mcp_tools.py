"""The MCP server's mapping onto the SDK, in process, over a recording transport."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from mcp import Client

from mongomem.errors import ConfigError, InputError, ScopeError, StorageError
from mongomem.ltm import kind_of
from mongomem.mcp_server import (
    McpServerConfig,
    build_server,
    describe_error,
    parse_args,
)
from mongomem.models import Action, Role, SessionEnd, Turn, utcnow
from mongomem.sdk import AsyncMemory, Identity, MemoryRecord, SaveResult
from mongomem.stm.turns import validate_role

TOOLS = {
    "record_turn",
    "recent_turns",
    "end_session",
    "list_sessions",
    "processing_status",
    "save_semantic",
    "get_semantic",
    "search_semantic",
    "save_episode",
    "search_episodes",
    "list_episodes",
    "save_procedure",
    "discover_procedures",
    "get_procedure",
    "save_taxonomic",
    "get_taxonomic_term",
    "search_taxonomic",
    "list_domains",
    "build_context",
    "search_turns",
    "memory_history",
    "delete_memory",
    "delete_memory_by_key",
    "whoami",
}


class RecordingTransport:
    """Keeps what it is given, with the SDK's own field checks; enough of MemoryTransport."""

    def __init__(self) -> None:
        self.saved: list[tuple[Identity, str, dict[str, str]]] = []
        self.turns: list[tuple[Identity, Turn]] = []
        self.ended: list[Identity] = []

    async def save(self, who: Identity, memory_type: str, fields: dict[str, str]) -> SaveResult:
        checked = kind_of(memory_type).check(fields)
        self.saved.append((who, memory_type, checked))
        n = len(self.saved)
        return SaveResult(
            action=Action.ADD, memory_id=f"m{n}", version=1, version_id=f"v{n}", reason="new"
        )

    async def get(self, who: Identity, memory_type: str, key: str) -> MemoryRecord | None:
        return None

    async def record_turn(
        self, who: Identity, role: Role | str, content: str, metadata: dict[str, Any] | None
    ) -> Turn:
        key = who.session()
        seq = 1 + sum(1 for w, _ in self.turns if w.session() == key)
        turn = Turn(
            turn_id=Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
            project_id=key.project_id,
            user_id=key.user_id,
            session_id=key.session_id,
            seq=seq,
            role=validate_role(role),
            content=content,
            metadata=metadata or {},
            created_at=utcnow(),
        )
        self.turns.append((who, turn))
        return turn

    async def recent_turns(self, who: Identity, limit: int) -> list[Turn]:
        return [t for w, t in self.turns if w.session() == who.session()][-limit:]

    async def end_session(self, who: Identity) -> SessionEnd:
        key = who.session()
        seq = 1 + sum(1 for w, _ in self.turns if w.session() == key)
        self.ended.append(who)
        return SessionEnd(
            seq_id=Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
            project_id=key.project_id,
            user_id=key.user_id,
            session_id=key.session_id,
            seq=seq,
            created_at=utcnow(),
        )

    async def close(self) -> None:
        pass


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def client(transport: RecordingTransport) -> Client:
    memory = AsyncMemory(project_id="proj", transport=transport)  # type: ignore[arg-type]
    config = McpServerConfig(project_id="proj", user_id="alice", session_id="s-default")
    return Client(build_server(memory, config))


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def _error(result: Any) -> str:
    """The text of a tool error (fails if the call did not fail)."""
    assert result.is_error, _text(result)
    return _text(result)


async def test_every_tool_is_listed_and_none_takes_an_identity(client: Client) -> None:
    async with client:
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        props = set(tool.input_schema.get("properties", {}))
        assert not props & {"project_id", "user_id", "service_account"}, tool.name
        assert tool.description, tool.name
    record = next(t for t in tools if t.name == "record_turn")
    assert record.input_schema["required"] == ["role", "content"]


async def test_record_turn_uses_the_default_or_named_session_of_the_same_user(
    client: Client, transport: RecordingTransport
) -> None:
    async with client:
        first = await client.call_tool("record_turn", {"role": "user", "content": "hi"})
        other = await client.call_tool(
            "record_turn", {"role": "assistant", "content": "yo", "session_id": "s-other"}
        )
    assert not first.is_error
    assert not other.is_error
    assert first.structured_content["session_id"] == "s-default"
    assert first.structured_content["seq"] == 1
    assert other.structured_content["session_id"] == "s-other"
    assert [(w.project_id, w.user_id, w.session_id) for w, _ in transport.turns] == [
        ("proj", "alice", "s-default"),
        ("proj", "alice", "s-other"),
    ]


async def test_end_session_ends_the_default_or_named_session_of_the_same_user(
    client: Client, transport: RecordingTransport
) -> None:
    async with client:
        await client.call_tool("record_turn", {"role": "user", "content": "hi"})
        ended = await client.call_tool("end_session", {})
        other = await client.call_tool("end_session", {"session_id": "s-other"})
    assert not ended.is_error
    assert (ended.structured_content["session_id"], ended.structured_content["seq"]) == (
        "s-default",
        2,
    )
    assert other.structured_content["session_id"] == "s-other"
    assert [(w.user_id, w.session_id) for w in transport.ended] == [
        ("alice", "s-default"),
        ("alice", "s-other"),
    ]


async def test_an_identity_argument_is_refused_and_nothing_runs(
    client: Client, transport: RecordingTransport
) -> None:
    async with client:
        result = await client.call_tool(
            "save_semantic", {"label": "x", "text": "y", "user_id": "bob"}
        )
    assert "unknown argument 'user_id'" in _error(result)
    assert transport.saved == []


async def test_sdk_input_errors_name_the_tool_argument(
    client: Client, transport: RecordingTransport
) -> None:
    async with client:
        procedure = await client.call_tool(
            "save_procedure", {"procedure": "  ", "description": "d", "content": "c"}
        )
        session = await client.call_tool(
            "record_turn", {"role": "user", "content": "hi", "session_id": "$where"}
        )
    assert "invalid input (procedure)" in _error(procedure)
    assert "invalid input (session_id)" in _error(session)
    assert transport.saved == []
    assert transport.turns == []


async def test_schema_violations_name_the_argument(client: Client) -> None:
    async with client:
        limit = await client.call_tool("recent_turns", {"limit": 0})
        role = await client.call_tool("record_turn", {"role": "narrator", "content": "x"})
        missing = await client.call_tool("save_semantic", {"label": "x"})
    assert "limit" in _error(limit)
    assert "role" in _error(role)
    assert "text" in _error(missing)


async def test_saves_map_onto_the_sdk_fields(client: Client, transport: RecordingTransport) -> None:
    async with client:
        await client.call_tool("save_semantic", {"label": "home", "text": "Boston"})
        await client.call_tool(
            "save_procedure", {"procedure": "p", "description": "d", "content": "c"}
        )
        await client.call_tool(
            "save_taxonomic", {"domain": "airline", "term": "red-eye", "definition": "overnight"}
        )
    assert [(t, f) for _, t, f in transport.saved] == [
        ("semantic", {"label": "home", "text": "Boston"}),
        ("procedural", {"name": "p", "description": "d", "content": "c"}),
        ("taxonomic", {"domain": "airline", "term": "red-eye", "definition": "overnight"}),
    ]
    assert {w.user_id for w, _, _ in transport.saved} == {"alice"}


async def test_a_missing_memory_is_found_false_not_an_error(client: Client) -> None:
    async with client:
        result = await client.call_tool("get_semantic", {"label": "nothing"})
    assert not result.is_error
    assert result.structured_content == {"found": False, "memory": None}


async def test_turns_resource_reads_a_session(client: Client) -> None:
    async with client:
        await client.call_tool("record_turn", {"role": "user", "content": "one"})
        await client.call_tool("record_turn", {"role": "user", "content": "two"})
        read = await client.read_resource("mongomem://sessions/s-default/turns")
        who = await client.read_resource("mongomem://identity")
    turns = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    assert [t["content"] for t in turns] == ["one", "two"]
    assert json.loads(who.contents[0].text)["user_id"] == "alice"  # type: ignore[union-attr]


def test_a_service_account_server_acts_as_the_account() -> None:
    memory = AsyncMemory(project_id="proj", transport=RecordingTransport())  # type: ignore[arg-type]
    server = build_server(memory, McpServerConfig(project_id="proj", service_account="bot"))
    assert server is not None
    config = McpServerConfig(project_id="proj", service_account="bot")
    assert memory.bind(config.request_context()).identity.user_id == "sa:bot"


def test_a_bad_launch_identity_fails_at_build_time() -> None:
    memory = AsyncMemory(project_id="proj", transport=RecordingTransport())  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        build_server(memory, McpServerConfig(project_id="proj", user_id="sa:bot"))
    with pytest.raises(ConfigError):
        build_server(memory, McpServerConfig(project_id="other", user_id="alice"))
    bad = AsyncMemory(project_id="$proj", transport=RecordingTransport())  # type: ignore[arg-type]
    with pytest.raises(InputError) as caught:
        build_server(bad, McpServerConfig(project_id="$proj", user_id="alice"))
    assert caught.value.field == "project_id"


def test_config_needs_exactly_one_caller() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        McpServerConfig(project_id="p")
    with pytest.raises(ValueError, match="exactly one"):
        McpServerConfig(project_id="p", user_id="u", service_account="s")
    with pytest.raises(SystemExit):
        parse_args(["--project-id", "p"])
    with pytest.raises(SystemExit):
        parse_args(["--project-id", "p", "--user-id", "u", "--service-account", "s"])


def test_parse_args_and_the_default_session() -> None:
    config = parse_args(["--project-id", "p", "--user-id", "u"])
    assert config.transport == "stdio"
    assert config.session_id.startswith("mcp-")
    assert parse_args(["--project-id", "p", "--user-id", "u"]).session_id != config.session_id
    named = parse_args(["--project-id", "p", "--user-id", "u", "--session-id", "s1"])
    assert named.session_id == "s1"
    http = parse_args(["--project-id", "p", "--user-id", "u", "--transport", "streamable-http"])
    assert (http.transport, http.host, http.port) == ("streamable-http", "127.0.0.1", 8765)


def test_describe_error() -> None:
    assert describe_error(InputError("bad", field="name"), {"name": "procedure"}) == (
        "invalid input (procedure): bad"
    )
    assert describe_error(InputError("bad")) == "invalid input: bad"
    assert describe_error(ScopeError("no")) == "not allowed: no"
    assert describe_error(StorageError("down")).endswith("(temporary; try again)")


def test_the_cli_options_parse_without_importing_the_mcp_sdk() -> None:
    """``mongomem`` builds its parser with :func:`add_arguments`; that must stay cheap."""
    code = (
        "import argparse, sys\n"
        "from mongomem.mcp_server import add_arguments, config_from_args\n"
        "parser = argparse.ArgumentParser()\n"
        "sub = parser.add_subparsers(dest='command', required=True)\n"
        "add_arguments(sub.add_parser('mcp'))\n"
        "args = parser.parse_args(['mcp', '--project-id', 'p', '--service-account', 'bot'])\n"
        "config = config_from_args(args)\n"
        "assert (config.project_id, config.service_account) == ('p', 'bot'), config\n"
        "assert 'mcp' not in sys.modules, 'the mcp SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
