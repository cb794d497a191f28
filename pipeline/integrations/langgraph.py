"""A LangGraph ``BaseStore`` over long-term memory (SPEC N1): ``MongomemStore``.

::

    from mongomem.sdk import Memory
    from mongomem.integrations.langgraph import MongomemStore

    store = MongomemStore(Memory(project_id="travel-agent"))
    store.put(("user_1", "semantic"), "home-airport", {"content": "Home airport: Boston."})
    graph = builder.compile(store=store)  # or create_react_agent(..., store=store)

**The mapping.** The store belongs to the project of its :class:`~mongomem.sdk.Memory`.
A namespace is ``(user_id, memory_type)``; the item's key is the memory's key and its
value the memory's fields, each type with its own value shape:

=============================  =====================  ==================================
namespace                      key                    value
=============================  =====================  ==================================
``(user_id, "semantic")``      the fact's label       ``{"content": text}``
``(user_id, "episodic")``      the episode's title    ``{"content": content}``
``(user_id, "procedural")``    the procedure's name   ``{"description": …, "content": …}``
``(user_id, "<custom type>")`` its key fields,        its declared fields, as declared
                               ``/``-joined           (``None`` where the model left one
                                                      out, or a put did)
=============================  =====================  ==================================

``{"content": str}`` is the shape LangMem's memory tools write, so they work unchanged
with ``namespace=("{langgraph_user_id}", "semantic")``.

**Custom types.** A user-scoped custom type declared in ``project-config.yaml``
(``memory.extraction.custom``, e.g. ``preference`` with fields ``topic`` and ``value``,
key ``[topic]``) is the namespace ``(user_id, "preference")``, mirroring the built-in
types: ``get``, ``search`` (with or without a query, with ``filter`` on its fields),
``list_namespaces``, ``put`` and ``delete`` work on it as on a built-in type. A put's
value has every declared field: the key field(s) as the key says, the others a string
or ``None`` (left out); a type keyed by more than one field is read and deleted here but
not put (one item key cannot say which part is which field). The types
are those of the ``project_config`` given to the store, else of the memory's own settings
(``MONGOMEM_PROJECT_CONFIG``); over HTTP the service's configuration must declare them too.

Anything else is refused with :class:`~mongomem.errors.Unmappable` naming this mapping,
before anything is stored:

- another namespace shape, or a type outside the table: ``taxonomic`` terms, and custom
  types declared with ``scope: project``, are project-wide, which a namespace naming a
  user would misstate (use the SDK's ``save_taxonomic``); an undeclared type is refused
  by ``put``, ``get`` and ``search`` alike (an empty answer would misstate what memory
  holds), and ``list_namespaces`` lists only the table's types;
- a value with other fields, or a field that is not a non-empty string;
- a key not in memory's normal form (:func:`~mongomem.ltm.kinds.normalize_key`:
  case-folded, spaces and underscores as ``-``), since ``Home Airport`` and
  ``home-airport`` are one memory here but two items in LangGraph's stores;
- a per-item ``ttl`` (see below); ``index`` is accepted and ignored: every memory is
  embedded, so every item is searchable.

**Writes are reconciled.** ``put`` is a direct SDK save: a new key is an ADD, a changed
value an UPDATE (a new version; the old one stays in ``history``), the same value a
REINFORCE. Reconciliation keeps one statement per fact, so a value equivalent to one
already stored under *another* key reinforces that memory instead; ``put`` then raises
:class:`~mongomem.errors.ReconciliationError` saying which memory it reinforced (the
reinforcement counts; nothing is stored under the new key) rather than return as if it
had stored it. ``put(..., None)`` / ``delete`` deletes the memory (a ``DELETE`` version).

**Reads.** ``get`` answers the current version (``created_at`` is when that version was
written, ``updated_at`` when it was last reinforced). ``search`` with a ``query`` is
memory's retrieval (the SDK's per-type search, scores are its similarities, best first);
without one it lists the current memories. ``filter`` is applied to the values with
LangGraph's matching (:func:`matches`: equality, ``$eq $ne $gt $gte $lt $lte``), then ``offset`` and
``limit``. Memories the pipeline extracted from conversations are items too.

**Namespaces.** A namespace is listed while it holds a current memory (as LangGraph's
Postgres store lists them; its in-memory store goes on listing a namespace whose items
were all deleted). ``list_namespaces`` needs the user: a prefix whose first element is the
user id (``prefix=("user_1",)``). mongomem has no listing of a project's users through
the SDK, so a listing across users is refused, not answered partially.

**TTL.** LangGraph's per-item TTL has no counterpart: retention (SPEC J8) is per memory
type, in ``project-config.yaml`` (``memory.retention.<type>.expire_after_days``), counted
from a memory's newest evidence. So ``supports_ttl`` is ``False`` (LangGraph's ``put``
refuses a ``ttl``; a ``PutOp`` carrying one is refused here), ``refresh_ttl`` is a
no-op, and a store-wide TTL is that retention setting.

**Sync and async.** The store runs every call on its ``Memory``'s own event loop
thread, so ``batch`` works from plain code and ``abatch`` from any event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mongomem.errors import ReconciliationError, Unmappable
from mongomem.extras import require
from mongomem.ltm.browse import make_filter
from mongomem.ltm.kinds import normalize_key
from mongomem.models import MemoryType
from mongomem.project_config import CustomTypeConfig, ProjectConfig, load_project_config
from mongomem.sdk import Memory, MemoryRecord, MemoryRequestContext
from mongomem.sdk.identity import Identity, resolve_identity

with require("langgraph"):
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )

__all__ = ["STORE_TYPES", "MongomemStore", "Shape", "matches", "namespace_matches"]

T = TypeVar("T")

#: Built-in memory type → (the field the item key is, {value field: memory field}).
STORE_TYPES: dict[str, tuple[str, dict[str, str]]] = {
    str(MemoryType.SEMANTIC): ("label", {"content": "text"}),
    str(MemoryType.EPISODIC): ("title", {"content": "content"}),
    str(MemoryType.PROCEDURAL): ("name", {"description": "description", "content": "content"}),
}

#: The most memories one search or listing reads per type (the SDK's own bound).
_READ_LIMIT = 1000


@dataclass(frozen=True)
class Shape:
    """How the items of one namespace ``(user_id, memory_type)`` map onto memories.

    ``key_field`` names the field the item key is (a custom type's key fields,
    ``/``-joined, as its extractor joins them); ``value`` maps each value field to the
    memory field it is; ``optional`` names the value fields that may be ``None`` (a
    custom type's fields outside its key); ``writable`` is ``False`` for a custom type
    keyed by more than one field (``put`` of a value is refused, ``delete`` is not).
    """

    key_field: str
    value: dict[str, str]
    writable: bool = True
    optional: frozenset[str] = frozenset()

    @classmethod
    def of_custom(cls, config: CustomTypeConfig) -> Shape:
        """A user-scoped custom type's items: its declared fields, as declared."""
        return cls(
            "/".join(config.key),
            {name: name for name in config.fields},
            writable=len(config.key) == 1,
            optional=frozenset(name for name in config.fields if name not in config.key),
        )


def _custom_shapes(
    declared: Iterable[CustomTypeConfig],
) -> tuple[dict[str, Shape], dict[str, str]]:
    """The namespaces of the user-scoped custom types, and why each project-scoped one
    has none."""
    shapes: dict[str, Shape] = {}
    refused: dict[str, str] = {}
    for config in declared:
        if config.scope == "project":
            refused[config.name] = (
                f"the custom type {config.name!r} is project-wide (scope: project in "
                "project-config.yaml), which a namespace naming a user would misstate"
            )
        else:
            shapes[config.name] = Shape.of_custom(config)
    return shapes, refused


def _check_key(namespace: tuple[str, ...], key: str) -> None:
    if key != normalize_key(key) or not key:
        raise Unmappable(
            f"key {key!r} in {namespace!r}: store keys are memory keys in normal form "
            f"({normalize_key(key)!r}): memory compares keys case-folded, with spaces and "
            "underscores as '-'"
        )


def _fields(
    shape_of: Shape,
    memory_type: str,
    namespace: tuple[str, ...],
    key: str,
    value: Mapping[str, Any],
) -> dict[str, str]:
    """The SDK save fields of a store value (see the module's table)."""
    key_field, shape = shape_of.key_field, shape_of.value
    if set(value) != set(shape):
        raise Unmappable(
            f"value for {namespace!r} has fields {sorted(value)}; {memory_type} items hold "
            f"exactly {sorted(shape)} (each a non-empty string), the key being the "
            f"{key_field}"
        )
    fields = {key_field: key}
    for name, field in shape.items():
        text = value[name]
        if text is None and name in shape_of.optional:
            continue  # a custom type's field left out (it reads back as None)
        if field == key_field and text != key:
            raise Unmappable(
                f"value[{name!r}] for {namespace!r} is {text!r}, but the item key is "
                f"{key!r}: {memory_type} memories are keyed by their {key_field}"
            )
        if not isinstance(text, str) or not text.strip():
            raise Unmappable(
                f"value[{name!r}] for {namespace!r} must be a non-empty string "
                f"(the memory's {field}); got {type(text).__name__}"
            )
        if text != text.strip():
            raise Unmappable(
                f"value[{name!r}] for {namespace!r} has leading or trailing whitespace, "
                "which memory strips: it would not read back as written"
            )
        fields[field] = text
    return fields


def matches(value: Any, wanted: Any) -> bool:
    """Whether a stored value matches a search ``filter`` entry, as LangGraph's stores
    match: nested dicts by key, lists element by element, ``$eq $ne $gt $gte $lt $lte``
    operators, else equality."""
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    match op:
        case "$eq":
            return bool(value == operand)
        case "$ne":
            return bool(value != operand)
        case "$gt" | "$gte" | "$lt" | "$lte":
            try:
                a, b = float(value), float(operand)
            except (TypeError, ValueError):
                return False
            return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
        case _:
            raise Unmappable(f"unsupported filter operator {op!r} ($eq $ne $gt $gte $lt $lte)")


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a ``list_namespaces`` prefix or suffix ("*" matches any)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True)) if path else True


def _value(shape: Shape, record: MemoryRecord) -> dict[str, Any]:
    def read(field: str) -> Any:
        if field in shape.optional:  # a custom type's field left out reads as None
            return record.fields.get(field)
        return record.fields.get(field, "")

    return {name: read(field) for name, field in shape.value.items()}


class MongomemStore(BaseStore):
    """LangGraph's ``BaseStore`` over one project's long-term memory (see the module).

    ``project_config`` (a ``project-config.yaml`` path or a loaded
    :class:`~mongomem.project_config.ProjectConfig`) names the custom types to read;
    by default those of the memory's own settings (``MONGOMEM_PROJECT_CONFIG``) when
    it reaches MongoDB directly, none over HTTP.
    """

    supports_ttl = False

    def __init__(
        self,
        memory: Memory,
        *,
        delete_reason: str = "deleted through LangGraph",
        project_config: ProjectConfig | Path | str | None = None,
    ) -> None:
        self.memory = memory
        self.delete_reason = delete_reason
        if isinstance(project_config, str | Path):
            project_config = load_project_config(Path(project_config))
        if project_config is not None:
            declared: Iterable[CustomTypeConfig] = project_config.memory.extraction.custom
        else:
            own = getattr(memory._async.transport, "custom_types", None)
            declared = own().values() if own is not None else ()
        custom, self._refused = _custom_shapes(declared)
        #: Memory type → how its items map (the built-in types, then the custom ones).
        self.shapes: dict[str, Shape] = {
            name: Shape(key_field, dict(value)) for name, (key_field, value) in STORE_TYPES.items()
        }
        self.shapes.update(custom)

    # -- the mapping ---------------------------------------------------------------------

    @property
    def _mapping(self) -> str:
        return "namespaces are (user_id, memory_type) with memory_type one of " + ", ".join(
            repr(t) for t in self.shapes
        )

    def _place(self, namespace: tuple[str, ...]) -> str:
        """The memory type a namespace names, or :class:`Unmappable` saying why not."""
        if len(namespace) != 2:
            raise Unmappable(f"namespace {namespace!r} does not map onto memory: {self._mapping}")
        memory_type = namespace[1]
        if memory_type == MemoryType.TAXONOMIC:
            raise Unmappable(
                f"namespace {namespace!r}: taxonomic terms are project-wide, which a namespace "
                "naming a user would misstate; save them with the SDK's save_taxonomic "
                f"({self._mapping})"
            )
        if memory_type in self._refused:
            raise Unmappable(
                f"namespace {namespace!r}: {self._refused[memory_type]} ({self._mapping})"
            )
        if memory_type not in self.shapes:
            raise Unmappable(
                f"namespace {namespace!r}: {memory_type!r} is neither a built-in memory type "
                "the store maps nor a custom type declared in project-config.yaml: "
                f"{self._mapping}"
            )
        return memory_type

    def _check_put(self, op: PutOp) -> None:
        """Refuse a put with no faithful mapping (:class:`Unmappable`), before any write."""
        memory_type = self._place(op.namespace)
        _check_key(op.namespace, op.key)
        if op.value is None:
            return
        if not self.shapes[memory_type].writable:
            raise Unmappable(
                f"put into {op.namespace!r}: {memory_type!r} is a custom type keyed by more "
                f"than one field ({self.shapes[memory_type].key_field}), which one item key "
                "cannot spell out; its items are read, searched and deleted here, not put"
            )
        if op.ttl is not None:
            raise Unmappable(
                f"put into {op.namespace!r} with ttl={op.ttl}: memory has no per-item TTL; "
                "retention is per memory type (project-config.yaml: "
                f"memory.retention.{memory_type}.expire_after_days)"
            )
        _fields(self.shapes[memory_type], memory_type, op.namespace, op.key, op.value)

    def _value(self, record: MemoryRecord) -> dict[str, Any]:
        return _value(self.shapes[record.memory_type], record)

    def _item(self, user_id: str, record: MemoryRecord) -> Item:
        return Item(
            value=self._value(record),
            key=record.key,
            namespace=(user_id, str(record.memory_type)),
            created_at=record.created_at,
            updated_at=record.updated_at,
        )

    def _search_item(self, user_id: str, record: MemoryRecord, score: float | None) -> SearchItem:
        item = self._item(user_id, record)
        return SearchItem(
            namespace=item.namespace,
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
            score=score,
        )

    # -- BaseStore -----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order on the memory's loop; one result per op."""
        return self._run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """As :meth:`batch`, awaited from any event loop."""
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._batch(list(ops)), self._loop)
        )

    # -- internals -----------------------------------------------------------------------

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        return self.memory._runner.loop  # the sync SDK's own loop thread runs our calls

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.memory._call(coro)

    def _who(self, user_id: str) -> Identity:
        return resolve_identity(self.memory.project_id, MemoryRequestContext(user_id=user_id))

    async def _batch(self, ops: list[Op]) -> list[Result]:
        """Reads first, on the state before the batch; then its puts, in order.

        That is LangGraph's batch semantics (its in-memory store answers a batch so): a
        get in the same batch as a put of its key reads the value before the put.
        Every op is checked before anything is written, so a refused op stores nothing.
        """
        for op in ops:
            if isinstance(op, PutOp):
                self._check_put(op)
            elif not isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                raise Unmappable(f"unknown store operation {type(op).__name__}")
        results: list[Result] = []
        for op in ops:
            match op:
                case GetOp():
                    results.append(await self._get(op))
                case SearchOp():
                    results.append(await self._search(op))
                case ListNamespacesOp():
                    results.append(await self._list_namespaces(op))
                case _:
                    results.append(None)
        for op in ops:
            if isinstance(op, PutOp):
                await self._put(op)
        return results

    async def _get(self, op: GetOp) -> Item | None:
        memory_type = self._place(op.namespace)
        _check_key(op.namespace, op.key)
        user = op.namespace[0]
        record = await self.memory._async.transport.get(self._who(user), memory_type, op.key)
        return None if record is None else self._item(user, record)

    async def _put(self, op: PutOp) -> None:
        memory_type = self._place(op.namespace)
        who = self._who(op.namespace[0])
        transport = self.memory._async.transport
        if op.value is None:
            await transport.delete_by_key(who, memory_type, op.key, self.delete_reason)
            return
        fields = _fields(self.shapes[memory_type], memory_type, op.namespace, op.key, op.value)
        saved = await transport.save(who, memory_type, fields)
        stored = await transport.get(who, memory_type, op.key)
        if stored is None or stored.memory_id != saved.memory_id:
            raise ReconciliationError(
                f"put {op.key!r} into {op.namespace!r} was reconciled as {saved.action} of "
                f"memory {saved.memory_id}: an equivalent statement is stored under another "
                f"key, so nothing is stored under {op.key!r} ({saved.reason})"
            )
        if self._value(stored) != dict(op.value):
            raise ReconciliationError(
                f"put {op.key!r} into {op.namespace!r} was reconciled as {saved.action}: "
                f"memory keeps the equivalent statement {self._value(stored)!r} ({saved.reason})"
            )

    def _search_types(self, prefix: tuple[str, ...]) -> tuple[str | None, list[str]]:
        if not prefix:
            raise Unmappable(
                f"search needs a namespace prefix naming the user ((user_id,) or "
                f"(user_id, memory_type)): {self._mapping}"
            )
        if len(prefix) == 1:
            return prefix[0], list(self.shapes)
        if len(prefix) == 2:  # a namespace: refused as get and put refuse it
            return prefix[0], [self._place(prefix)]
        return None, []  # deeper than any namespace

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        user, types = self._search_types(op.namespace_prefix)
        if user is None:
            return []
        who = self._who(user)
        transport = self.memory._async.transport
        fetch = _READ_LIMIT if op.filter else min(_READ_LIMIT, max(op.offset + op.limit, 1))
        found: list[tuple[MemoryRecord, float | None]] = []
        for memory_type in types:
            if op.query:
                hits = await transport.search(who, memory_type, op.query, fetch, None)
                found.extend((h.memory, h.score) for h in hits)
            else:
                records = await transport.list_memories(who, memory_type, fetch, None)
                found.extend((r, None) for r in records)
        if op.query:
            found.sort(key=lambda pair: -(pair[1] or 0.0))
        items = [
            self._search_item(user, record, score)
            for record, score in found
            if not op.filter
            or all(matches(self._value(record).get(k), v) for k, v in op.filter.items())
        ]
        return items[op.offset : op.offset + op.limit]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        users = [
            c.path[0]
            for c in conditions
            if c.match_type == "prefix" and c.path and c.path[0] != "*"
        ]
        if not users:
            raise Unmappable(
                "list_namespaces needs a prefix whose first element is the user id "
                "(prefix=(user_id,)): memory lists namespaces per user, not across a "
                f"project's users; {self._mapping}"
            )
        user = users[0]
        who = self._who(user)
        transport = self.memory._async.transport
        namespaces: list[tuple[str, ...]] = []
        for memory_type in self.shapes:
            if await transport.count_memories(who, make_filter(memory_type)):
                namespaces.append((user, memory_type))
        namespaces = [ns for ns in namespaces if all(namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces.sort()
        return namespaces[op.offset : op.offset + op.limit]
