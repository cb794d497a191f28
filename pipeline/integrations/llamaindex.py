"""A LlamaIndex memory block over mongomem (SPEC N2): ``MongomemMemoryBlock``.

::

    from llama_index.core.memory import Memory
    from mongomem.sdk import AsyncMemory
    from mongomem.integrations.llamaindex import MongomemMemoryBlock

    block = MongomemMemoryBlock(memory=AsyncMemory(project_id="travel-agent"), user_id="user_1")
    chat_memory = Memory.from_defaults(session_id="thread_123", memory_blocks=[block])

LlamaIndex's ``Memory`` keeps the recent chat itself (its FIFO queue) and asks each block
for long-term content:

- ``aget`` answers :meth:`~mongomem.sdk.AsyncBoundMemory.build_context` for the latest
  user message (or the input passed to ``Memory.aget``): the rendered text of the
  relevant memories, which ``Memory`` inserts into the prompt (empty when there is no
  user message yet, so nothing is inserted).
- ``aput`` records the messages ``Memory`` hands it as turns of the mongomem session
  ``(project, user_id, session_id)``: those the queue ejects once it is over its token
  limit (``accept_short_term_memory``), so every message is recorded once, when it
  leaves the queue. The session is the block's ``session_id`` if set, else ``Memory``'s.
  Each message's role maps onto a turn role (``chatbot``/``model`` → assistant,
  ``function`` → tool, ``developer`` → system) and the whole message is kept in the
  turn's metadata (``metadata["llamaindex"]["message"]``, its JSON). A message with no
  text (a bare tool call) is recorded as ``[tool call]`` with the message in metadata.

Long-term memory grows from those turns in the background (the pipeline), and from
direct SDK saves; the block never writes long-term memory itself.
"""

from __future__ import annotations

from typing import Any

from mongomem.errors import InputError
from mongomem.extras import require
from mongomem.models import Role
from mongomem.sdk import (
    DEFAULT_CONTEXT_TYPES,
    AsyncBoundMemory,
    AsyncMemory,
    MemoryRequestContext,
)

with require("llamaindex"):
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.memory.memory import BaseMemoryBlock

__all__ = ["MongomemMemoryBlock"]

#: The metadata key that holds this integration's part of a turn.
META = "llamaindex"

_ROLES: dict[str, Role] = {
    MessageRole.USER.value: Role.USER,
    MessageRole.ASSISTANT.value: Role.ASSISTANT,
    MessageRole.CHATBOT.value: Role.ASSISTANT,
    MessageRole.MODEL.value: Role.ASSISTANT,
    MessageRole.SYSTEM.value: Role.SYSTEM,
    MessageRole.DEVELOPER.value: Role.SYSTEM,
    MessageRole.TOOL.value: Role.TOOL,
    MessageRole.FUNCTION.value: Role.TOOL,
}


class MongomemMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory as a block of LlamaIndex's ``Memory`` (see the module)."""

    name: str = Field(default="mongomem", description="The block's name in the prompt.")
    description: str | None = Field(
        default="What long-term memory knows that is relevant to the conversation."
    )
    memory: AsyncMemory = Field(description="The mongomem memory of the project.")
    user_id: str = Field(description="Whose memory.")
    session_id: str | None = Field(
        default=None, description="The mongomem session; default: the Memory's session_id."
    )
    include: tuple[str, ...] = Field(default=tuple(DEFAULT_CONTEXT_TYPES))
    limit_per_type: int = Field(default=5)
    max_chars: int = Field(default=4000)

    def _bound(self, session_id: str | None) -> AsyncBoundMemory:
        return self.memory.bind(
            MemoryRequestContext(user_id=self.user_id, session_id=self.session_id or session_id)
        )

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        query = next(
            (
                m.content
                for m in reversed(messages or [])
                if m.role == MessageRole.USER and m.content
            ),
            None,
        )
        if not query or not query.strip():
            return ""
        chat = self._bound(block_kwargs.get("session_id"))
        context = await chat.build_context(
            query,
            include=self.include,
            limit_per_type=self.limit_per_type,
            max_chars=self.max_chars,
        )
        return str(context.text)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        roles = [_ROLES.get(str(m.role.value)) for m in messages]
        if None in roles:
            bad = next(m.role for m, r in zip(messages, roles, strict=True) if r is None)
            raise InputError(f"a LlamaIndex message has a role memory has no turn for: {bad!r}")
        for message, role in zip(messages, roles, strict=True):
            assert role is not None
            session = self.session_id or message.additional_kwargs.get("session_id")
            chat = self._bound(None if session is None else str(session))
            text = (message.content or "").strip() or "[tool call]"
            await chat.record_turn(role, text, {META: {"message": message.model_dump_json()}})
