"""The LangGraph store over long-term memory (SPEC N1), through LangGraph's own classes:
side by side with LangGraph's ``InMemoryStore``, a real ``StateGraph`` with a scripted
chat model, and LangMem's memory tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langmem import create_manage_memory_tool, create_search_memory_tool
from pymongo import AsyncMongoClient
from scripted_chat import ScriptedChatModel, tool_call

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import Document
from mongomem.errors import ReconciliationError, Unmappable
from mongomem.integrations.langgraph import MongomemStore
from mongomem.models import Action
from mongomem.sdk import Memory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

U = "user_1"
SEM, EPI, PROC = (U, "semantic"), (U, "episodic"), (U, "procedural")


@pytest.fixture
def memory(settings: Settings, mongo: AsyncMongoClient[Document]) -> Iterator[Memory]:
    with Memory(project_id="lg", settings=settings, embedder=HashingEmbedder(64)) as m:
        yield m


@pytest.fixture
def store(memory: Memory) -> MongomemStore:
    return MongomemStore(memory)


def view(item: Item | None) -> tuple[Any, ...] | None:
    """What both stores must agree on (times differ: see the module's docstring)."""
    return None if item is None else (item.namespace, item.key, item.value)


def views(items: list[Any]) -> list[tuple[Any, ...] | None]:
    return sorted((view(i) for i in items), key=repr)


def same_calls(stores: list[BaseStore]) -> list[list[Any]]:
    """The same calls on each store; what each answered."""
    answers: list[list[Any]] = []
    for s in stores:
        got: list[Any] = []
        s.put(SEM, "home-airport", {"content": "The home airport is Boston."})
        s.put(SEM, "seat", {"content": "The user prefers aisle seats."})
        s.put(EPI, "lisbon-trip", {"content": "Planned a summer trip to Lisbon."})
        s.put(PROC, "compare-flights", {"description": "Compare.", "content": "By price."})
        got.append(view(s.get(SEM, "home-airport")))
        got.append(view(s.get(SEM, "missing")))
        s.put(SEM, "home-airport", {"content": "The home airport is Denver."})
        got.append(view(s.get(SEM, "home-airport")))
        got.append(s.list_namespaces(prefix=(U,)))
        got.append(s.list_namespaces(prefix=(U,), max_depth=1))
        got.append(s.list_namespaces(prefix=(U,), suffix=("episodic",)))
        got.append(s.list_namespaces(prefix=(U, "semantic")))
        got.append(views(s.search((U,))))
        got.append(views(s.search(SEM)))
        got.append(views(s.search((U,), filter={"content": "The user prefers aisle seats."})))
        got.append(views(s.search((U,), filter={"description": {"$eq": "Compare."}})))
        got.append(views(s.search((U,), filter={"content": {"$ne": "By price."}})))
        got.append(len(s.search((U,), limit=2)))
        got.append(len(s.search((U,), limit=2, offset=3)))
        got.append(views(s.search((U, "semantic", "deeper"))))
        s.delete(SEM, "seat")
        got.append(view(s.get(SEM, "seat")))
        s.delete(SEM, "never-was")
        s.delete(EPI, "lisbon-trip")
        got.append(views(s.search((U,))))
        answers.append(got)
    return answers


def test_same_answers_as_langgraphs_in_memory_store(store: MongomemStore) -> None:
    ours, theirs = same_calls([store, InMemoryStore()])
    assert ours == theirs
    assert ours[0] == (SEM, "home-airport", {"content": "The home airport is Boston."})
    assert ours[3] == [EPI, PROC, SEM]  # list_namespaces, sorted as LangGraph sorts
    # a namespace is listed while it holds a memory (as LangGraph's Postgres store does;
    # its in-memory store keeps listing emptied namespaces)
    assert store.list_namespaces(prefix=(U,)) == [PROC, SEM]


async def test_abatch_answers_each_op_as_the_in_memory_store(store: MongomemStore) -> None:
    batches: list[list[Any]] = [
        [
            PutOp(SEM, "home-airport", {"content": "The home airport is Boston."}),
            PutOp(EPI, "lisbon-trip", {"content": "Planned a summer trip to Lisbon."}),
        ],
        [
            GetOp(SEM, "home-airport"),
            GetOp(EPI, "nothing"),
            SearchOp((U,), filter={"content": "Planned a summer trip to Lisbon."}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", (U,)),)),
        ],
        # reads see the state before the batch's puts
        [PutOp(SEM, "home-airport", None), GetOp(SEM, "home-airport")],
        [GetOp(SEM, "home-airport")],
    ]
    theirs_store = InMemoryStore()
    for ops in batches:
        ours = await store.abatch(ops)
        theirs = await theirs_store.abatch(ops)
        assert len(ours) == len(theirs) == len(ops)
        pairs: list[tuple[Any, Any]] = list(zip(ours, theirs, strict=True))
        for a, b in pairs:
            if isinstance(a, list) and a and isinstance(a[0], Item):
                assert views(a) == views(b)
            elif isinstance(a, Item) or a is None:
                assert view(a) == view(b)
            else:
                assert a == b
    assert ours[0] is None
    put_then_get = await store.abatch([PutOp(SEM, "x", {"content": "X."}), GetOp(SEM, "x")])
    assert put_then_get[1] is None
    # the async convenience methods too
    await store.aput(PROC, "pack", {"description": "Packing.", "content": "Roll clothes."})
    got = await store.aget(PROC, "pack")
    assert got is not None
    assert got.value == {"description": "Packing.", "content": "Roll clothes."}
    assert await store.alist_namespaces(prefix=(U,)) == [EPI, PROC, SEM]
    await store.adelete(PROC, "pack")
    assert await store.aget(PROC, "pack") is None


def test_put_is_reconciled_a_changed_value_is_an_update_with_history(
    store: MongomemStore, memory: Memory
) -> None:
    store.put(SEM, "home-airport", {"content": "The home airport is Boston."})
    store.put(SEM, "home-airport", {"content": "The home airport is Boston."})
    store.put(SEM, "home-airport", {"content": "The home airport is Denver."})
    chat = memory.bind(MemoryRequestContext(user_id=U))
    fact = chat.get_semantic("home-airport")
    assert fact is not None
    assert fact.text == "The home airport is Denver."
    history = chat.history(fact.memory_id)
    # the repeat reinforced version 1 (no new version); the change is version 2
    assert [v.action for v in history] == [Action.ADD, Action.UPDATE]
    assert history[0].text == "The home airport is Boston."
    # an SDK save is an item of the store at once, and the other way round
    chat.save_episode(title="Lisbon trip", content="Planned a summer trip to Lisbon.")
    item = store.get(EPI, "lisbon-trip")
    assert item is not None
    assert item.value == {"content": "Planned a summer trip to Lisbon."}
    # a delete through the store is a DELETE version with the store's reason
    store.delete(SEM, "home-airport")
    last = chat.history(fact.memory_id)[-1]
    assert (last.action, last.reason) == (Action.DELETE, "deleted through LangGraph")


def test_search_with_a_query_uses_memorys_retrieval(store: MongomemStore) -> None:
    store.put(SEM, "home-airport", {"content": "The home airport is Boston Logan."})
    store.put(SEM, "seat", {"content": "The user prefers aisle seats on long flights."})
    store.put(SEM, "diet", {"content": "The user eats vegetarian food."})
    hits = store.search((U,), query="which airport is home", limit=2)
    assert next(h.key for h in hits) == "home-airport"
    assert len(hits) == 2
    assert hits[0].score is not None
    assert hits[0].score >= (hits[1].score or 0.0)
    filtered = store.search((U,), query="airport", filter={"content": {"$ne": "x"}}, limit=5)
    assert {h.key for h in filtered} == {"home-airport", "seat", "diet"}


def test_what_has_no_faithful_mapping_is_refused_and_nothing_is_stored(
    store: MongomemStore, memory: Memory
) -> None:
    refusals: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
        (("memories", U, "x"), "k", {"content": "a"}),  # not (user, type)
        ((U, "taxonomic"), "k", {"content": "a"}),  # project-wide
        ((U, "preference"), "k", {"content": "a"}),  # a custom type
        (SEM, "k", {"content": "a", "kind": "note"}),  # another field
        (SEM, "k", {"text": "a"}),  # the wrong field
        (SEM, "k", {"content": 3}),  # not a string
        (SEM, "k", {"content": {"nested": "json"}}),  # arbitrary JSON
        (SEM, "Home Airport", {"content": "a"}),  # a key memory would normalise
        (PROC, "k", {"content": "a"}),  # missing description
    ]
    for namespace, key, value in refusals:
        with pytest.raises(Unmappable) as err:
            store.put(namespace, key, value)
        assert repr(namespace) in str(err.value)  # names the mapping it fails
    # a namespace the store cannot read is refused by get and search too, not answered empty
    for namespace in [(U, "taxonomic"), (U, "preference")]:
        with pytest.raises(Unmappable, match=repr(namespace[1])):
            store.get(namespace, "k")
        with pytest.raises(Unmappable, match=repr(namespace[1])):
            store.search(namespace, query="anything")
    with pytest.raises(Unmappable, match="ttl"):
        store.batch([PutOp(SEM, "k", {"content": "a"}, ttl=5.0)])
    with pytest.raises(NotImplementedError, match="TTL"):  # LangGraph's own refusal
        store.put(SEM, "k", {"content": "a"}, ttl=5.0)
    with pytest.raises(Unmappable, match="user id"):
        store.list_namespaces()
    with pytest.raises(Unmappable, match="user"):
        store.search(())
    chat = memory.bind(MemoryRequestContext(user_id=U))
    assert chat.count_memories() == 0


def test_a_put_reconciled_into_another_key_says_so(store: MongomemStore) -> None:
    store.put(SEM, "seat", {"content": "The user prefers aisle seats."})
    with pytest.raises(ReconciliationError, match="REINFORCE of memory"):
        store.put(SEM, "seating", {"content": "The user prefers aisle seats."})
    assert store.get(SEM, "seating") is None


def agent_graph(model: ScriptedChatModel, store: BaseStore) -> Any:
    namespace = ("{langgraph_user_id}", "semantic")
    tools = [create_manage_memory_tool(namespace), create_search_memory_tool(namespace)]

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(store=store)


def remember_then_recall(store: BaseStore) -> tuple[str, list[dict[str, Any]]]:
    """Two runs of a graph whose scripted model stores, then recalls, through LangMem."""
    model = ScriptedChatModel(
        script=[
            tool_call("manage_memory", {"content": "Home airport is Boston."}, "c1"),
            AIMessage(content="Noted."),
            tool_call("search_memory", {"query": "home airport"}, "c2"),
            AIMessage(content="You fly from Boston."),
        ]
    )
    graph = agent_graph(model, store)
    config = {"configurable": {"langgraph_user_id": U}}
    graph.invoke({"messages": [HumanMessage("My home airport is Boston.")]}, config)
    out = graph.invoke({"messages": [HumanMessage("Where do I fly from?")]}, config)
    [found] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return out["messages"][-1].content, json.loads(str(found.content))


def test_a_graph_with_langmem_tools_stores_and_recalls_through_the_store(
    store: MongomemStore, memory: Memory
) -> None:
    answer, recalled = remember_then_recall(store)
    assert answer == "You fly from Boston."
    assert [m["value"] for m in recalled] == [{"content": "Home airport is Boston."}]
    assert recalled[0]["namespace"] == list(SEM)
    # it is long-term memory: the SDK reads what the agent stored
    chat = memory.bind(MemoryRequestContext(user_id=U))
    [hit] = chat.search_semantic("home airport")
    assert hit.memory.text == "Home airport is Boston."
    assert hit.memory.label == recalled[0]["key"]
    # the same graph on LangGraph's own store recalls the same
    _, theirs = remember_then_recall(InMemoryStore())
    assert [m["value"] for m in theirs] == [m["value"] for m in recalled]


async def test_langmem_update_through_an_async_graph_is_an_update_with_history(
    store: MongomemStore, memory: Memory
) -> None:
    model = ScriptedChatModel(
        script=[
            tool_call("manage_memory", {"content": "Home airport is Boston."}, "c1"),
            AIMessage(content="Noted."),
        ]
    )
    graph = agent_graph(model, store)
    config = {"configurable": {"langgraph_user_id": U}}
    await graph.ainvoke({"messages": [HumanMessage("I fly from Boston.")]}, config)
    [item] = await store.asearch(SEM)
    model.script.extend(
        [
            tool_call(
                "manage_memory",
                {"content": "Home airport is Denver.", "action": "update", "id": item.key},
                "c2",
            ),
            AIMessage(content="Updated."),
        ]
    )
    await graph.ainvoke({"messages": [HumanMessage("I moved: Denver now.")]}, config)
    chat = memory.bind(MemoryRequestContext(user_id=U))
    fact = chat.get_semantic(item.key)
    assert fact is not None
    assert fact.text == "Home airport is Denver."
    assert [v.action for v in chat.history(fact.memory_id)] == [Action.ADD, Action.UPDATE]
