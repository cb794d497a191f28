"""The LlamaIndex memory block (SPEC N2), through LlamaIndex's own ``Memory`` and a chat
engine on its ``MockLLM`` (which answers with the prompt it was given: not a model)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import Memory
from pymongo import AsyncMongoClient
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.integrations.llamaindex import MongomemMemoryBlock
from mongomem.models import Role
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
async def memory(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="li", settings=settings, embedder=HashingEmbedder(64)) as m:
        yield m


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    """LlamaIndex's chat store (its default: SQLite in memory), closed after the test."""
    made = create_async_engine("sqlite+aiosqlite:///:memory:")
    yield made
    await made.dispose()


async def test_the_block_puts_long_term_memory_into_the_prompt(
    memory: AsyncMemory, engine: AsyncEngine
) -> None:
    chat = memory.bind(MemoryRequestContext(user_id="user_1"))
    await chat.save_semantic(label="home-airport", text="The user's home airport is Boston.")
    block = MongomemMemoryBlock(memory=memory, user_id="user_1")
    chat_memory = Memory.from_defaults(
        session_id="thread_1", memory_blocks=[block], async_engine=engine
    )
    chat_engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=chat_memory)

    reply = await chat_engine.achat("Which home airport do I fly from?")
    # MockLLM echoes its prompt: the memory block's content was in it
    assert "The user's home airport is Boston." in str(reply)
    assert "<mongomem>" in str(reply)  # LlamaIndex's template names the block
    # another user's memory is not
    other = MongomemMemoryBlock(memory=memory, user_id="user_2")
    assert await other.aget([ChatMessage(role="user", content="home airport")]) == ""
    assert await block.aget([]) == ""  # no user message: nothing to look up


async def test_messages_ejected_from_the_queue_are_recorded_as_turns(
    memory: AsyncMemory, engine: AsyncEngine
) -> None:
    block = MongomemMemoryBlock(memory=memory, user_id="user_1")
    chat_memory = Memory.from_defaults(
        session_id="thread_2",
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=20,
        memory_blocks=[block],
        async_engine=engine,
    )
    said = [
        ChatMessage(role="user", content="My home airport is Boston, and I fly a lot."),
        ChatMessage(role="assistant", content="Noted, Boston it is for your flights."),
        ChatMessage(role="user", content="I also prefer aisle seats on long flights."),
        ChatMessage(role="assistant", content="Aisle seats on long flights, noted."),
    ]
    for message in said:
        await chat_memory.aput(message)
    kept = await chat_memory.aget()
    turns = await memory.bind(
        MemoryRequestContext(user_id="user_1", session_id="thread_2")
    ).recent_turns()
    assert turns, "LlamaIndex ejected messages from its queue: the block recorded them"
    ejected = said[: len(turns)]
    assert [t.content for t in turns] == [m.content for m in ejected]
    assert [t.role for t in turns] == [Role(m.role.value) for m in ejected]
    assert turns[0].role is Role.USER
    assert '"role":"user"' in turns[0].metadata["llamaindex"]["message"]
    # what is left in the queue is what was not recorded yet
    assert [m.content for m in kept if m.role != "system"][-1] == said[-1].content
