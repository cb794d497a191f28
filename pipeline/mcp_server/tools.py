"""The tools of the MCP server: thin mappings onto :class:`~mongomem.sdk.AsyncBoundMemory`.

Every tool acts for the :class:`~mongomem.mcp_server.caller.FixedCaller` fixed at
launch. ``session_id`` (where a tool takes one) picks another session *of that
caller*; no tool takes a project or user id. Results are the SDK's own models,
sent as structured content (and as JSON text for clients that read only text).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from mongomem.extras import require
from mongomem.mcp_server.caller import FixedCaller, Lookup, tool_errors
from mongomem.models import Role, SessionEnd, Turn
from mongomem.sdk import (
    DEFAULT_CONTEXT_TYPES,
    DeleteResult,
    Episode,
    MemoryContext,
    Procedure,
    ProcessingStatus,
    SaveResult,
    SearchHit,
    SemanticMemory,
    TaxonomicTerm,
    VersionRecord,
)
from mongomem.stm.search import TurnHit
from mongomem.stm.turns import SessionSummary

with require("mcp"):
    from mcp.server.mcpserver import MCPServer

__all__ = ["register_tools"]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
SAVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
#: Forgetting is destructive but repeatable: deleting twice changes nothing more.
DELETE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
Reason = Annotated[str | None, Field(description="optional; why, kept in the history")]


class Deletion(BaseModel):
    """The result of a delete tool: what was deleted, or ``found: false``."""

    model_config = ConfigDict(frozen=True)

    found: bool
    deletion: DeleteResult | None = None


Session = Annotated[
    str | None,
    Field(description="one of this user's sessions; default: the server's session"),
]
Query = Annotated[str, Field(description="what to look for, in natural language")]
#: Sent again with the same key (e.g. after a timeout), a save is applied once.
IdempotencyKey = Annotated[
    str | None,
    Field(
        description=(
            "optional; a fresh id (a UUID) per save makes retrying it safe: the same key "
            "again returns the first result and changes nothing"
        )
    ),
]


def Limit(what: str) -> Any:  # a Field, named to read like a type in signatures
    return Field(ge=1, le=1000, description=f"at most this many {what}")


def register_tools(server: MCPServer[Any], caller: FixedCaller) -> None:
    """Add every tool to ``server``."""
    _short_term(server, caller)
    _semantic_and_episodic(server, caller)
    _procedural_and_taxonomic(server, caller)
    _across_types(server, caller)


def _short_term(server: MCPServer[Any], caller: FixedCaller) -> None:
    @server.tool(annotations=SAVE)
    async def record_turn(
        role: Annotated[Role, Field(description="who spoke")],
        content: Annotated[str, Field(description="what was said")],
        metadata: Annotated[
            dict[str, Any] | None, Field(description="optional JSON object kept with the turn")
        ] = None,
        session_id: Session = None,
        at: Annotated[
            datetime | None,
            Field(
                description="optional; a past turn's own time (ISO 8601 with an offset), for "
                "importing old conversations; not before the session's previous turn"
            ),
        ] = None,
        speaker: Annotated[
            str | None,
            Field(
                description="optional; who spoke besides the role (a person's name or a "
                "participant id), for conversations between people"
            ),
        ] = None,
    ) -> Turn:
        """Record one conversation turn (short-term memory); it gets the session's next seq."""
        with tool_errors():
            bound = caller.bind(session_id)
            return await bound.record_turn(role, content, metadata, at=at, speaker=speaker)

    @server.tool(annotations=READ)
    async def recent_turns(
        limit: Annotated[int, Limit("turns")] = 20, session_id: Session = None
    ) -> list[Turn]:
        """The last turns of a session, oldest first."""
        with tool_errors():
            return await caller.bind(session_id).recent_turns(limit)

    @server.tool(annotations=SAVE)
    async def end_session(session_id: Session = None) -> SessionEnd:
        """End a session now: its open window is summarised at once, without waiting to go idle."""
        with tool_errors():
            return await caller.bind(session_id).end_session()

    @server.tool(annotations=READ)
    async def processing_status(session_id: Session = None) -> ProcessingStatus:
        """Has extraction caught up? Per snapshot of the session and memory type: pending,
        done, or dead_lettered (with the error); last_turn_seq beyond last_snapshot_seq
        counts turns not yet in a snapshot."""
        with tool_errors():
            return await caller.bind(session_id).processing_status()

    @server.tool(annotations=READ)
    async def list_sessions(limit: Annotated[int, Limit("sessions")] = 100) -> list[SessionSummary]:
        """This user's sessions, most recently active first."""
        with tool_errors():
            return await caller.default.list_sessions(limit)


def _semantic_and_episodic(server: MCPServer[Any], caller: FixedCaller) -> None:
    @server.tool(annotations=SAVE)
    async def save_semantic(
        label: Annotated[str, Field(description="short stable key, e.g. home-airport")],
        text: Annotated[str, Field(description="the fact, as a sentence")],
        idempotency_key: IdempotencyKey = None,
    ) -> SaveResult:
        """Remember a fact about the user; a new text for a known label becomes a new version."""
        with tool_errors():
            return await caller.default.save_semantic(label, text, idempotency_key=idempotency_key)

    @server.tool(annotations=READ)
    async def get_semantic(label: str) -> Lookup[SemanticMemory]:
        """The current version of the fact with this label."""
        with tool_errors():
            found = await caller.default.get_semantic(label)
        return Lookup[SemanticMemory](found=found is not None, memory=found)

    @server.tool(annotations=READ)
    async def search_semantic(
        query: Query, limit: Annotated[int, Limit("facts")] = 5
    ) -> list[SearchHit[SemanticMemory]]:
        """Facts about the user most similar to the query, best first."""
        with tool_errors():
            return await caller.default.search_semantic(query, limit)

    @server.tool(annotations=SAVE)
    async def save_episode(
        title: Annotated[str, Field(description="a short title of what happened")],
        content: Annotated[str, Field(description="what happened")],
        idempotency_key: IdempotencyKey = None,
    ) -> SaveResult:
        """Remember an episode (something that happened, e.g. a planning session)."""
        with tool_errors():
            return await caller.default.save_episode(
                title, content, idempotency_key=idempotency_key
            )

    @server.tool(annotations=READ)
    async def search_episodes(
        query: Query, limit: Annotated[int, Limit("episodes")] = 5
    ) -> list[SearchHit[Episode]]:
        """Episodes most similar to the query, best first."""
        with tool_errors():
            return await caller.default.search_episodes(query, limit)

    @server.tool(annotations=READ)
    async def list_episodes(limit: Annotated[int, Limit("episodes")] = 50) -> list[Episode]:
        """This user's episodes."""
        with tool_errors():
            return await caller.default.list_episodes(limit)


def _procedural_and_taxonomic(server: MCPServer[Any], caller: FixedCaller) -> None:
    @server.tool(annotations=SAVE)
    async def save_procedure(
        procedure: Annotated[str, Field(description="the procedure's name, e.g. compare-flights")],
        description: Annotated[str, Field(description="what it is for, in one line")],
        content: Annotated[str, Field(description="the steps")],
        idempotency_key: IdempotencyKey = None,
    ) -> SaveResult:
        """Remember how to do something."""
        with tool_errors(aliases={"name": "procedure"}):
            return await caller.default.save_procedure(
                procedure, description, content, idempotency_key=idempotency_key
            )

    @server.tool(annotations=READ)
    async def discover_procedures(
        query: Query, limit: Annotated[int, Limit("procedures")] = 5
    ) -> list[SearchHit[Procedure]]:
        """Procedures that fit the task described by the query, best first."""
        with tool_errors():
            return await caller.default.discover_procedures(query, limit)

    @server.tool(annotations=READ)
    async def get_procedure(name: str) -> Lookup[Procedure]:
        """The current version of the named procedure."""
        with tool_errors():
            found = await caller.default.get_procedure(name)
        return Lookup[Procedure](found=found is not None, memory=found)

    @server.tool(annotations=SAVE)
    async def save_taxonomic(
        domain: Annotated[str, Field(description="the vocabulary, e.g. airline (no '/')")],
        term: str,
        definition: str,
        idempotency_key: IdempotencyKey = None,
    ) -> SaveResult:
        """Define a term for the whole project (every user of the project shares terms)."""
        with tool_errors():
            return await caller.default.save_taxonomic(
                domain, term, definition, idempotency_key=idempotency_key
            )

    @server.tool(annotations=READ)
    async def get_taxonomic_term(domain: str, term: str) -> Lookup[TaxonomicTerm]:
        """The project's definition of a term."""
        with tool_errors():
            found = await caller.default.get_taxonomic_term(domain, term)
        return Lookup[TaxonomicTerm](found=found is not None, memory=found)

    @server.tool(annotations=READ)
    async def search_taxonomic(
        query: Query,
        domain: Annotated[str | None, Field(description="only this domain")] = None,
        limit: Annotated[int, Limit("terms")] = 5,
    ) -> list[SearchHit[TaxonomicTerm]]:
        """The project's terms most similar to the query, best first."""
        with tool_errors():
            return await caller.default.search_taxonomic(query, domain, limit)

    @server.tool(annotations=READ)
    async def list_domains() -> list[str]:
        """The project's term domains."""
        with tool_errors():
            return await caller.default.list_domains()


def _across_types(server: MCPServer[Any], caller: FixedCaller) -> None:
    @server.tool(annotations=READ)
    async def build_context(
        query: Query,
        include: Annotated[
            list[str] | None,
            Field(
                description="memory types to include: semantic, episodic, procedural, "
                "taxonomic (default: semantic and episodic)"
            ),
        ] = None,
        limit_per_type: Annotated[int, Limit("memories per type")] = 5,
        max_chars: Annotated[int, Field(ge=1, description="size of the rendered text")] = 4000,
        include_turns: Annotated[
            int,
            Field(ge=0, le=50, description="also add this many of the best raw turns, dated"),
        ] = 0,
    ) -> MemoryContext:
        """Memories relevant to the query, as structured items and as text for a prompt.

        A time expression in the query ("last May", "two weeks ago") boosts the
        memories and turns of its window, counted from now."""
        with tool_errors():
            return await caller.default.build_context(
                query,
                include=DEFAULT_CONTEXT_TYPES if include is None else include,
                limit_per_type=limit_per_type,
                max_chars=max_chars,
                include_turns=include_turns,
            )

    @server.tool(annotations=READ)
    async def search_turns(
        query: Query,
        limit: Annotated[int, Field(ge=1, le=100, description="at most this many turns")] = 10,
        sessions: Annotated[
            list[str] | None, Field(description="optional; only turns of these sessions")
        ] = None,
        speaker: Annotated[str | None, Field(description="optional; only this speaker's")] = None,
        since: Annotated[
            datetime | None, Field(description="optional; turns said at or after (ISO 8601)")
        ] = None,
        until: Annotated[
            datetime | None, Field(description="optional; turns said at or before (ISO 8601)")
        ] = None,
        neighbours: Annotated[
            int, Field(ge=0, le=5, description="turns before and after each hit to add")
        ] = 0,
        as_of: Annotated[
            datetime | None,
            Field(description="optional; when asked: later turns left out, 'last May' read there"),
        ] = None,
    ) -> list[TurnHit]:
        """Search this user's whole conversation history (every session) for turns about the
        query: words and meaning fused; each hit has its session, date and ranks."""
        with tool_errors():
            return await caller.default.search_turns(
                query,
                limit,
                sessions=sessions,
                speaker=speaker,
                since=since,
                until=until,
                neighbours=neighbours,
                as_of=as_of,
            )

    @server.tool(annotations=READ)
    async def memory_history(memory_id: str) -> list[VersionRecord]:
        """Every version of one of this user's memories, oldest first (empty if not theirs)."""
        with tool_errors():
            return await caller.default.history(memory_id)

    @server.tool(annotations=DELETE)
    async def delete_memory(
        memory_id: Annotated[str, Field(description="the memory's id (from a save or a read)")],
        reason: Reason = None,
    ) -> Deletion:
        """Forget one of this user's memories: no read returns it again; its history keeps
        the deletion (when, by whom, why). Deleting it again changes nothing."""
        with tool_errors():
            done = await caller.default.delete_memory(memory_id, reason=reason)
        return Deletion(found=done is not None, deletion=done)

    @server.tool(annotations=DELETE)
    async def delete_memory_by_key(
        memory_type: Annotated[str, Field(description="semantic, episodic, procedural, ...")],
        key: Annotated[
            str,
            Field(description="label, title, procedure name, or domain/term for taxonomic"),
        ],
        reason: Reason = None,
    ) -> Deletion:
        """Forget this user's current memory of a type with this key (as delete_memory)."""
        with tool_errors():
            done = await caller.default.delete_by_key(memory_type, key, reason=reason)
        return Deletion(found=done is not None, deletion=done)

    @server.tool(annotations=READ)
    async def whoami() -> dict[str, Any]:
        """The project, user and default session this server acts for."""
        return caller.describe()
