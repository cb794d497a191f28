"""A CrewAI ``Crew`` run with mongomem as its memory (SPEC N2): kickoff saves to it, and a
later crew, in a new ``Memory`` over a new storage, recalls from it.

Every LLM call of the run (the agent's, and the memory's analysis) goes to
:class:`ScriptedLLM`, a ``crewai.BaseLLM`` that answers by rule from the prompt — a
stand-in, NOT a model. CrewAI has an environment of its own (see pyproject.toml): this
file is skipped where it is not installed, and `make test-extras` runs it with
``[crewai]`` alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

# CrewAI phones home unless told not to: nothing leaves the machine.
for _name, _value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}.items():
    os.environ.setdefault(_name, _value)

crewai = pytest.importorskip("crewai", reason="crewai has an environment of its own")

from crewai import Agent, BaseLLM, Crew, Process, Task  # noqa: E402
from crewai import Memory as CrewMemory  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402
from pymongo import AsyncMongoClient  # noqa: E402

from mongomem.adapters.embeddings import HashingEmbedder  # noqa: E402
from mongomem.adapters.mongo import Document  # noqa: E402
from mongomem.integrations.crewai import META, MongomemStorage  # noqa: E402
from mongomem.models import Role  # noqa: E402
from mongomem.sdk import Memory, MemoryRequestContext  # noqa: E402
from mongomem.settings import Settings  # noqa: E402

pytestmark = [
    pytest.mark.integration,
    # CrewAI's Agent reads its own deprecated fields while it sets itself up
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai.*"),
]

#: what CrewAI's memory prompts open with (crewai/translations/en.json, "memory")
EXTRACT = "You extract discrete, reusable memory statements"
ANALYSE_SAVE = "You analyze content to be stored in a hierarchical memory system"
ANALYSE_QUERY = "You analyze a query for searching memory"
CONSOLIDATE = "You are comparing new content against existing memories"
STAND_IN = "scripted-stand-in"


class ScriptedLLM(BaseLLM):  # type: ignore[misc]  # crewai is untyped where mypy runs
    """A scripted CrewAI LLM (a stand-in, NOT a model). Its rules:

    - memory extraction: each sentence of the task's result (its final answer) is a memory;
    - save analysis: scope ``/travel``, category ``travel``, importance 0.7;
    - query analysis: the query itself, no scope; consolidation: keep all, insert;
    - the agent: ``Final Answer:`` the memories its prompt shows (the lines after
      ``Relevant memories:``), or, without any, the ``note`` it was given.

    Each call is kept in ``calls`` as (which rule answered, the prompt).
    """

    note: str = ""
    _calls: list[tuple[str, str]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def calls(self, rule: str) -> list[str]:
        """The prompts the rule ``rule`` answered (``extract``, ``save``, ``agent``, …)."""
        with self._lock:
            return [text for kind, text in self._calls if kind == rule]

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        text = "\n".join(str(m.get("content", "")) for m in messages)
        rule, answer = self._answer(text)
        with self._lock:
            self._calls.append((rule, text))
        return answer

    def _answer(self, text: str) -> tuple[str, str]:
        if text.startswith(EXTRACT):
            result = text.split("\nResult: ", 1)[1].split("\n\nExtract memory statements")[0]
            result = result.split("Final Answer:")[-1]
            sentences = [s.strip() + "." for s in result.split(".") if s.strip()]
            return "extract", json.dumps({"memories": sentences})
        if text.startswith(ANALYSE_SAVE):
            analysis = {"suggested_scope": "/travel", "categories": ["travel"], "importance": 0.7}
            return "save", json.dumps(analysis)
        if text.startswith(ANALYSE_QUERY):
            (query,) = re.findall(r"^Query: (.*)$", text, flags=re.MULTILINE)
            return "query", json.dumps({"recall_queries": [query], "complexity": "simple"})
        if text.startswith(CONSOLIDATE):
            return "consolidate", json.dumps({"actions": [], "insert_new": True})
        recalled = re.findall(r"^- \(score=[0-9.]+\) (.*)$", text, flags=re.MULTILINE)
        answer = " ".join(recalled) if recalled else self.note
        return "agent", f"Thought: I now can give a great answer\nFinal Answer: {answer}"


def embed(texts: list[str]) -> list[list[float]]:
    """A bag-of-words hashing embedder for CrewAI (a stand-in, NOT a model)."""
    out = []
    for text in texts:
        vector = [0.0] * 32
        for word in re.findall(r"[a-z]+", text.lower()):
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 32] += 1.0
        out.append(vector)
    return out


@pytest.fixture
def memory(settings: Settings, mongo: AsyncMongoClient[Document]) -> Iterator[Memory]:
    with Memory(project_id="crew", settings=settings, embedder=HashingEmbedder(64)) as m:
        yield m


def crew(memory: Memory, llm: ScriptedLLM, task: str) -> tuple[Crew, CrewMemory]:
    """A one-agent crew whose memory is a new CrewAI ``Memory`` on mongomem."""
    crew_memory = CrewMemory(
        storage=MongomemStorage(memory, user_id="crew_1"), llm=llm, embedder=embed
    )
    agent = Agent(
        role="Travel planner",
        goal="Plan the user's trips",
        backstory="Keeps what it learns about the user.",
        llm=llm,
        allow_delegation=False,
    )
    made = Crew(
        agents=[agent],
        tasks=[Task(description=task, expected_output="One sentence.", agent=agent)],
        process=Process.sequential,
        memory=crew_memory,
    )
    return made, crew_memory


def test_a_crew_kickoff_saves_to_mongomem_and_a_later_crew_recalls_it(memory: Memory) -> None:
    first_llm = ScriptedLLM(
        model=STAND_IN, note="The user's home airport is Boston. The user prefers aisle seats."
    )
    first, first_memory = crew(memory, first_llm, "Write down what the user told you.")
    done = first.kickoff()
    first_memory.close()
    assert str(done.raw) == first_llm.note
    [first_prompt] = first_llm.calls("agent")
    assert "Relevant memories:" not in first_prompt  # nothing to recall yet
    assert len(first_llm.calls("extract")) == 1  # CrewAI's memory analysed the task's output
    assert len(first_llm.calls("save")) == 2  # and each memory it found

    # kickoff saved what the task produced: each memory a turn of the crew's session
    chat = memory.bind(MemoryRequestContext(user_id="crew_1", session_id="crewai-memory"))
    saved = [t for t in chat.recent_turns() if META in t.metadata]
    assert sorted(t.content for t in saved) == [
        "The user prefers aisle seats.",
        "The user's home airport is Boston.",
    ]
    assert {t.role for t in saved} == {Role.ASSISTANT}
    assert all('"/travel"' in t.metadata[META]["record"] for t in saved)  # the analysis' scope

    # a new crew (a new CrewAI Memory, a new storage: only MongoDB is shared) recalls it
    second_llm = ScriptedLLM(model=STAND_IN, note="I do not know.")
    second, second_memory = crew(memory, second_llm, "Which airport does the user fly from?")
    answer = second.kickoff()
    second_memory.close()
    [prompt] = second_llm.calls("agent")
    assert "Relevant memories:" in prompt
    assert "The user's home airport is Boston." in prompt
    assert "The user's home airport is Boston." in str(answer.raw)
