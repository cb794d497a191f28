"""The memory-space tools of the MCP server (SPEC H): case memory an agent reads and adds to.

Spaces are **project-wide**: every agent of the project shares them (SPEC H1),
so a tool reaches the spaces of the server's project and no other; the space
is named by ``space``, never a project. The server's caller (its user id, or
``sa:<account>`` for a service account) is recorded as the agent of what it
adds (``agent_id``, and ``resolved_by`` of a resolved escalation), and recall
uses that agent's own search keys if it was attached with some (SPEC H6).

==================  ====================================================================
tool                call of :class:`~mongomem.spaces.AsyncSpaces`
==================  ====================================================================
list_spaces         ``list_spaces()``: ids, kinds, keys, recall settings, item counts
recall_cases        ``recall(space, inputs)``: similar past cases with their scores
add_case            ``add_item(...)``; without ``on_duplicate``, near-duplicates are
                    returned (``action: needs-choice``) and nothing is stored
check_escalation    ``check_escalation(space, inputs)``: apply the stored outcome or raise
resolve_escalation  ``resolve_escalation(...)``: a person's decision becomes a case
playground          ``playground(space, inputs)``: what recall would return; writes nothing
==================  ====================================================================

**Not exposed**, on purpose: creating, editing and deleting spaces, attaching
agents and changing keys (they change what every agent of the project recalls;
SPEC H6 wants a confirmed, deliberate change, not a tool call an LLM may make),
editing or deleting items one by one (curation of shared cases, for the people
who own the space), export and import (whole spaces in plain text, even
encrypted ones, SPEC H9: a backup and migration job, not a chat tool), and
``promote_feedback`` (it needs the trace id of a feedback UI; ``add_case``
carries the same comment and sentiment). The SDK, the HTTP API and
``mongomem spaces`` do those.

The server's :class:`LazySpaces` makes its spaces client on the first spaces
call (no MongoDB connection before), and :func:`~mongomem.mcp_server.serve`
closes it when the server stops. Any object with these six calls will do:
:class:`~mongomem.spaces.AsyncSpaces` (the default) or
:class:`~mongomem.spaces.HttpSpaces`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from mongomem.errors import ConfigError, InputError
from mongomem.extras import require
from mongomem.mcp_server.server import Caller, tool_errors
from mongomem.mcp_server.tools import READ, SAVE
from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
from mongomem.spaces.models import (
    AddResult,
    EscalationDecision,
    FileInput,
    PlaygroundResult,
    RecallHit,
    Sentiment,
    Space,
    SpaceItem,
    validated,
)

with require("mcp"):
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "DuplicateChoice",
    "LazySpaces",
    "SpacesApi",
    "on_duplicate_from",
    "register_space_tools",
]

#: SDK field → tool argument, for the errors a client reads.
ALIASES = {
    "space_id": "space",
    "on_duplicate.item_ids": "replace_ids",
    "on_duplicate.sentiment_wins": "sentiment_wins",
}
DuplicateChoice = Literal["add-anyway", "replace", "merge"]


class SpacesApi(Protocol):
    """The calls of :class:`~mongomem.spaces.AsyncSpaces` (and ``HttpSpaces``) the tools use."""

    async def list_spaces(self) -> list[Space]: ...

    async def recall(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> list[RecallHit]: ...

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
    ) -> AddResult: ...

    async def check_escalation(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> EscalationDecision: ...

    async def resolve_escalation(
        self,
        space_id: str,
        *,
        inputs: Mapping[str, Any],
        resolution: str,
        outcome: str,
        agent_id: str | None = None,
        resolved_by: str | None = None,
    ) -> SpaceItem: ...

    async def playground(
        self, space_id: str, inputs: Mapping[str, Any], *, agent_id: str | None = None
    ) -> PlaygroundResult: ...

    async def close(self) -> None: ...


class LazySpaces:
    """The server's spaces client: ``source`` is one, or a function that makes one.

    A function is called on the first spaces tool call, so a server that is
    never asked about spaces never connects for them. :meth:`close` closes
    whatever was given or made (once). A client that says its project
    (``project_id``, as :class:`~mongomem.spaces.AsyncSpaces` does) must be of
    the server's project.
    """

    def __init__(self, source: SpacesApi | Callable[[], SpacesApi]) -> None:
        self._make: Callable[[], SpacesApi] | None = source if callable(source) else None
        self._spaces: SpacesApi | None = None if callable(source) else source
        self._lock = asyncio.Lock()
        self.project_id: str | None = None  # the server's, set by register_space_tools

    @property
    def opened(self) -> bool:
        """Whether the spaces client exists yet (it is made on first use)."""
        return self._spaces is not None

    async def get(self) -> SpacesApi:
        async with self._lock:
            if self._spaces is None:
                if self._make is None:
                    raise ConfigError("the server has stopped: its spaces are closed")
                self._spaces = self._make()
            project = getattr(self._spaces, "project_id", None)
            if project is not None and self.project_id is not None and project != self.project_id:
                raise ConfigError(
                    f"the spaces are of project {project!r}, "
                    f"the server was configured for {self.project_id!r}"
                )
            return self._spaces

    async def close(self) -> None:
        async with self._lock:
            spaces, self._spaces, self._make = self._spaces, None, None
        if spaces is not None:
            await spaces.close()


def on_duplicate_from(
    choice: DuplicateChoice | None,
    replace_ids: Sequence[str] | None = None,
    sentiment_wins: Literal["existing", "new"] | None = None,
) -> OnDuplicate | None:
    """The SDK's duplicate choice for ``add_case``'s flat arguments (an
    :class:`~mongomem.errors.InputError` naming the argument when they do not fit)."""
    if replace_ids is not None and choice != "replace":
        raise InputError("replace_ids goes with on_duplicate='replace'", field="replace_ids")
    if sentiment_wins is not None and choice != "merge":
        raise InputError("sentiment_wins goes with on_duplicate='merge'", field="sentiment_wins")
    if choice == "add-anyway":
        return AddAnyway()
    if choice == "merge":
        return Merge(sentiment_wins=sentiment_wins)
    if choice == "replace":
        if not replace_ids:
            raise InputError(
                "on_duplicate='replace' needs replace_ids: the ids of the cases to replace",
                field="replace_ids",
            )
        return validated(Replace, {"item_ids": tuple(replace_ids)}, prefix="on_duplicate")
    return None


SpaceArg = Annotated[str, Field(description="the space's id (see list_spaces)")]
Inputs = Annotated[
    dict[str, str | FileInput],
    Field(
        description=(
            "the case's named input arguments: argument → text, or a file as "
            '{"name": ..., "text": ...}; use the space\'s search-key arguments'
        )
    ),
]


def register_space_tools(server: MCPServer[Any], caller: Caller, spaces: LazySpaces) -> None:
    """Add the memory-space tools to ``server``, acting for ``caller``'s project and agent."""
    spaces.project_id = caller.config.project_id
    agent = caller.default.identity.user_id
    _reading(server, spaces, agent)
    _writing(server, spaces, agent)


def _reading(server: MCPServer[Any], spaces: LazySpaces, agent: str) -> None:
    @server.tool(annotations=READ)
    async def list_spaces() -> list[Space]:
        """The project's memory spaces (shared by its agents): kind, search keys, recall
        settings and item count of each."""
        with tool_errors(ALIASES):
            return await (await spaces.get()).list_spaces()

    @server.tool(annotations=READ)
    async def recall_cases(space: SpaceArg, inputs: Inputs) -> list[RecallHit]:
        """Past cases of an episodic space similar to these inputs, best first, each with
        its score; use them as examples before acting."""
        with tool_errors(ALIASES):
            return await (await spaces.get()).recall(space, inputs, agent_id=agent)

    @server.tool(annotations=READ)
    async def check_escalation(space: SpaceArg, inputs: Inputs) -> EscalationDecision:
        """Before raising an escalation: if the closest past resolution matches well
        enough, ``apply`` is true and ``outcome`` is what was decided; else raise it.
        Only the top match is returned."""
        with tool_errors(ALIASES):
            return await (await spaces.get()).check_escalation(space, inputs, agent_id=agent)

    @server.tool(annotations=READ)
    async def playground(space: SpaceArg, inputs: Inputs) -> PlaygroundResult:
        """Simulate recall (stores nothing): which cases would match and which just missed,
        with scores; for an escalation space, whether a past resolution would apply."""
        with tool_errors(ALIASES):
            return await (await spaces.get()).playground(space, inputs, agent_id=agent)


def _writing(server: MCPServer[Any], spaces: LazySpaces, agent: str) -> None:
    @server.tool(annotations=SAVE)
    async def add_case(
        space: SpaceArg,
        inputs: Inputs,
        outputs: Annotated[
            dict[str, Any] | None, Field(description="what the agent produced (JSON object)")
        ] = None,
        outcome: Annotated[str | None, Field(description="how the case ended")] = None,
        comment: Annotated[str, Field(description="feedback on the case")] = "",
        sentiment: Annotated[Sentiment, Field(description="the feedback's sentiment")] = "neutral",
        on_duplicate: Annotated[
            DuplicateChoice | None,
            Field(
                description=(
                    "only after a call answered needs-choice: add-anyway, replace (the cases "
                    "in replace_ids) or merge (the feedback into the closest duplicate)"
                )
            ),
        ] = None,
        replace_ids: Annotated[
            list[str] | None, Field(description="with replace: the case ids to replace")
        ] = None,
        sentiment_wins: Annotated[
            Literal["existing", "new"] | None,
            Field(description="with merge, when the sentiments differ: which one is kept"),
        ] = None,
    ) -> AddResult:
        """Add a case to an episodic space. If near-duplicates exist and on_duplicate is not
        given, nothing is stored: the answer is action=needs-choice with the duplicates;
        call again with a choice."""
        with tool_errors(ALIASES):
            choice = on_duplicate_from(on_duplicate, replace_ids, sentiment_wins)
            return await (await spaces.get()).add_item(
                space, inputs=inputs, outputs=outputs, outcome=outcome, comment=comment,
                sentiment=sentiment, agent_id=agent, on_duplicate=choice,
            )  # fmt: skip

    @server.tool(annotations=SAVE)
    async def resolve_escalation(
        space: SpaceArg,
        inputs: Inputs,
        resolution: Annotated[str, Field(description="why it was decided so, in words")],
        outcome: Annotated[str, Field(description="what was decided")],
    ) -> SpaceItem:
        """Store how a person resolved an escalation, so that the same escalation is
        resolved the same way next time (see check_escalation)."""
        with tool_errors(ALIASES):
            return await (await spaces.get()).resolve_escalation(
                space, inputs=inputs, resolution=resolution, outcome=outcome,
                agent_id=agent, resolved_by=agent,
            )  # fmt: skip
