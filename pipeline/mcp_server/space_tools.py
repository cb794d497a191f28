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
closes it when the server stops. Any :class:`~mongomem.sdk.spaces.SpacesTransport`
will do: :class:`~mongomem.spaces.AsyncSpaces` (the default) or
:class:`~mongomem.sdk.spaces.HttpSpaces`.

The reading tools are derived from the operations table
(:data:`~mongomem.sdk.spaces.wire.SPACE_OPERATIONS`): :data:`READ_TOOLS` names the
call each makes, and its arguments (``space_id`` as ``space``, ``inputs``; the
caller as ``agent_id``) and result come from the call's entry. ``add_case`` and
``resolve_escalation`` adapt their call for an LLM (flat duplicate choices, the
caller as ``resolved_by``) and are written out.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from mongomem.errors import ConfigError, InputError
from mongomem.extras import require
from mongomem.mcp_server.caller import FixedCaller, tool_errors
from mongomem.mcp_server.tools import READ, SAVE
from mongomem.sdk.spaces.transport import SpacesTransport
from mongomem.sdk.spaces.wire import SPACE_OPERATIONS
from mongomem.spaces.dedupe import AddAnyway, Merge, OnDuplicate, Replace
from mongomem.spaces.models import AddResult, FileInput, Sentiment, SpaceItem, validated

with require("mcp"):
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "READ_TOOLS",
    "DuplicateChoice",
    "LazySpaces",
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


class LazySpaces:
    """The server's spaces client: ``source`` is one, or a function that makes one.

    A function is called on the first spaces tool call, so a server that is
    never asked about spaces never connects for them. :meth:`close` closes
    whatever was given or made (once). A client that says its project
    (``project_id``, as :class:`~mongomem.spaces.AsyncSpaces` does) must be of
    the server's project.
    """

    def __init__(self, source: SpacesTransport | Callable[[], SpacesTransport]) -> None:
        self._make: Callable[[], SpacesTransport] | None = source if callable(source) else None
        self._spaces: SpacesTransport | None = None if callable(source) else source
        self._lock = asyncio.Lock()
        self.project_id: str | None = None  # the server's, set by register_space_tools

    @property
    def opened(self) -> bool:
        """Whether the spaces client exists yet (it is made on first use)."""
        return self._spaces is not None

    async def get(self) -> SpacesTransport:
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


def register_space_tools(server: MCPServer[Any], caller: FixedCaller, spaces: LazySpaces) -> None:
    """Add the memory-space tools to ``server``, acting for ``caller``'s project and agent."""
    spaces.project_id = caller.config.project_id
    agent = caller.default.identity.user_id
    _reading(server, spaces, agent)
    _writing(server, spaces, agent)


#: The reading tools: tool → the call of the table it makes, and what it tells the LLM.
READ_TOOLS: dict[str, tuple[str, str]] = {
    "list_spaces": (
        "list_spaces",
        "The project's memory spaces (shared by its agents): kind, search keys, recall "
        "settings and item count of each.",
    ),
    "recall_cases": (
        "recall",
        "Past cases of an episodic space similar to these inputs, best first, each with "
        "its score; use them as examples before acting.",
    ),
    "check_escalation": (
        "check_escalation",
        "Before raising an escalation: if the closest past resolution matches well "
        "enough, ``apply`` is true and ``outcome`` is what was decided; else raise it. "
        "Only the top match is returned.",
    ),
    "playground": (
        "playground",
        "Simulate recall (stores nothing): which cases would match and which just missed, "
        "with scores; for an escalation space, whether a past resolution would apply.",
    ),
}

#: A call's argument → the tool's parameter (``agent_id`` is the caller, never asked).
_TOOL_PARAMETERS = {"space_id": ("space", SpaceArg), "inputs": ("inputs", Inputs)}


def _reading(server: MCPServer[Any], spaces: LazySpaces, agent: str) -> None:
    for tool, (call, description) in READ_TOOLS.items():
        server.tool(name=tool, description=description, annotations=READ)(
            _read_tool(spaces, agent, tool, call)
        )


def _read_tool(spaces: LazySpaces, agent: str, tool: str, call: str) -> Callable[..., Any]:
    """The tool that makes ``call`` for ``agent`` (see :data:`READ_TOOLS`)."""
    op = SPACE_OPERATIONS[call]
    # a tool lists every space: paging (list_spaces' limit, offset) is the SDK's and HTTP's
    fields = [f for f in op.request.model_fields if f not in ("agent_id", "limit", "offset")]
    unknown = set(fields) - set(_TOOL_PARAMETERS)
    assert not unknown, f"{call} takes {unknown}: write its tool out"
    by_agent = "agent_id" in op.request.model_fields

    async def run(**given: Any) -> Any:
        args = [given[_TOOL_PARAMETERS[f][0]] for f in fields]
        with tool_errors(ALIASES):
            method = getattr(await spaces.get(), call)
            return await (method(*args, agent_id=agent) if by_agent else method(*args))

    keyword = inspect.Parameter.KEYWORD_ONLY
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(_TOOL_PARAMETERS[f][0], keyword, annotation=_TOOL_PARAMETERS[f][1])
            for f in fields
        ],
        return_annotation=op.result,
    )
    run.__name__ = run.__qualname__ = tool
    return run


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
                space,
                inputs=inputs,
                outputs=outputs,
                outcome=outcome,
                comment=comment,
                sentiment=sentiment,
                agent_id=agent,
                on_duplicate=choice,
            )

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
                space,
                inputs=inputs,
                resolution=resolution,
                outcome=outcome,
                agent_id=agent,
                resolved_by=agent,
            )
