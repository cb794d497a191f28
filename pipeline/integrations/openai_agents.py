"""An OpenAI Agents SDK ``Session`` over short-term memory (SPEC N1): ``MongomemSession``.

::

    from agents import Agent, Runner
    from mongomem.sdk import AsyncMemory
    from mongomem.integrations.openai_agents import MongomemSession

    memory = AsyncMemory(project_id="travel-agent")
    session = MongomemSession(memory, user_id="user_1", session_id="thread_123")
    result = await Runner.run(agent, "My home airport is Boston.", session=session)
    await session.end_session()  # summarise now, not after the idle timeout

**Items are turns.** ``add_items`` records each item as one turn of the mongomem
session ``(project, user_id, session_id)``, so the pipeline windows and extracts from
the conversation as from any other:

============================================  ===========  ==============================
item                                          turn role    turn content
============================================  ===========  ==============================
a message (``role`` user/assistant/system;    its role     its text (the text parts
``developer`` is recorded as ``system``)                   joined)
``function_call`` (and other model calls)     assistant    ``name(arguments)``
``function_call_output`` (``*_output``)       tool         the output
============================================  ===========  ==============================

The item itself is kept in the turn's metadata, exactly (``metadata["openai_agents"]
["item"]``, the item as JSON text, so no key of it is rewritten), and ``get_items``
answers those items: roles, tool calls, call ids and every other field come back as
they went in. An item that is not JSON, or larger than the short-term memory's limits
(``MONGOMEM_STM_MAX_CONTENT_BYTES``, ``…_MAX_METADATA_BYTES``), is refused with
:class:`~mongomem.errors.InputError` and nothing of that call is stored after it.

**Turns are a log, so removal is a marker.** Short-term memory never rewrites a turn
(turns are the evidence memories cite). ``pop_item`` records a ``system`` turn that
withdraws the latest item (its metadata names the withdrawn turn's seq); ``get_items``
leaves both out. The withdrawn turn stays in short-term memory, and extraction may still
read it; to forget it, erase the session.

**``clear_session`` starts a new conversation; it is not an erasure.** It ends the
mongomem session's open window (``end_session``: what was said so far is summarised
into long-term memory now) and records a ``system`` marker turn; ``get_items`` answers
only the items after the last marker. Why not an erasure: the Agents SDK clears a
session to reset the agent's context and goes on using it, but an erasure
(``AsyncMemory.erase_session``, SPEC J2) retires the session id, so the next
``add_items`` would be refused; and resetting a chat is not a request to forget the
user. To forget, call ``erase_session`` (explicit, ``confirm=True``).

``get_items`` reads the session's turns oldest first, a page at a time (one indexed
read per 1,000 turns); the Agents SDK calls it once per run.
"""

from __future__ import annotations

import json
from typing import Any

from mongomem.errors import InputError
from mongomem.extras import require
from mongomem.models import Role, SessionEnd, Turn
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, MemoryRequestContext

with require("openai-agents"):
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

__all__ = ["MongomemSession", "turn_of"]

#: The metadata key that holds this integration's part of a turn.
META = "openai_agents"
_PAGE = 1000
_ROLES = {
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}
_POPPED = "openai-agents: the agent session withdrew its latest item (pop_item)."
_CLEARED = "openai-agents: the agent session was cleared; a new conversation starts here."


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if p)
    return ""


def turn_of(item: TResponseInputItem) -> tuple[Role, str, dict[str, Any]]:
    """The turn an item is recorded as: role, content and metadata (see the module)."""
    raw: Any = item
    if not isinstance(raw, dict):
        raise InputError(
            f"an Agents session item must be a dict, got {type(raw).__name__}", field="items"
        )
    try:
        exact = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InputError(f"an Agents session item is not JSON: {exc}", field="items") from None
    kind = str(raw.get("type") or "message")
    role_name = raw.get("role")
    if kind == "message" or role_name is not None:
        role = _ROLES.get(str(role_name))
        if role is None:
            raise InputError(f"an Agents message has an unknown role {role_name!r}", field="items")
        content = _text(raw.get("content"))
    elif kind.endswith("_output"):
        role = Role.TOOL
        output = raw.get("output")
        content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    else:
        role = Role.ASSISTANT
        if "name" in raw:
            content = f"{raw['name']}({raw.get('arguments', '')})"
        else:
            content = _text(raw.get("content")) or _text(raw.get("summary"))
    content = content.strip() or f"[{kind}]"
    return role, content, {META: {"item": exact, "type": kind}}


def _entry(turn: Turn) -> dict[str, Any] | None:
    part = turn.metadata.get(META)
    return part if isinstance(part, dict) else None


class MongomemSession:
    """The Agents SDK's ``Session`` protocol on one mongomem session (see the module)."""

    session_settings: SessionSettings | None = None

    def __init__(self, memory: AsyncMemory, *, user_id: str, session_id: str) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.chat: AsyncBoundMemory = memory.bind(
            MemoryRequestContext(user_id=user_id, session_id=session_id)
        )

    async def _visible(self) -> list[tuple[int, TResponseInputItem]]:
        """The items after the last clear, less the withdrawn ones, oldest first."""
        items: list[tuple[int, TResponseInputItem]] = []
        cursor: str | None = None
        while True:
            page = await self.chat.browse_turns(limit=_PAGE, cursor=cursor)
            for turn in page.items:
                entry = _entry(turn)
                if entry is None:
                    continue  # a turn recorded by other means: not an item of this session
                if entry.get("clear"):
                    items = []
                elif "pop" in entry:
                    items = [(seq, it) for seq, it in items if seq != entry["pop"]]
                elif "item" in entry:
                    items.append((turn.seq, json.loads(entry["item"])))
            cursor = page.next_cursor
            if cursor is None:
                return items

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order; with ``limit``, the latest ``limit`` of them."""
        items = [item for _, item in await self._visible()]
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Record each item as a turn (all are checked before the first is recorded)."""
        turns = [turn_of(item) for item in items]
        for role, content, metadata in turns:
            await self.chat.record_turn(role, content, metadata)

    async def pop_item(self) -> TResponseInputItem | None:
        """Withdraw the latest item (a marker turn; see the module) and answer it."""
        visible = await self._visible()
        if not visible:
            return None
        seq, item = visible[-1]
        await self.chat.record_turn(Role.SYSTEM, _POPPED, {META: {"pop": seq}})
        return item

    async def clear_session(self) -> None:
        """End the conversation so far and start a new one (not an erasure: see the module)."""
        if not await self._visible():
            return
        await self.chat.end_session()
        await self.chat.record_turn(Role.SYSTEM, _CLEARED, {META: {"clear": True}})

    async def end_session(self) -> SessionEnd:
        """mongomem's ``end_session``: summarise the conversation now (SDK semantics)."""
        return await self.chat.end_session()
