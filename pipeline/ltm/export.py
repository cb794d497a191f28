"""Exporting and importing one user's long-term memory (SPEC J4).

The line format, its checks and the relocation of ids into another scope are
in :mod:`mongomem.ltm.export_format`. Here is the I/O, with these guarantees:

* **Streaming.** :func:`export_lines` reads two cursors (the user's versions
  by ``(memory_id, version)``, then the user's decision-log entries by ``_id``,
  both served by indexes :meth:`MemoryStore.setup` creates) and yields one line
  at a time; at most :data:`CHUNK` versions are held at once (to look up the
  turn ids of their snapshots in one read). :func:`import_lines` reads lines
  from any async iterable and holds one memory's versions, and at most
  :data:`CHUNK` documents waiting to be written, at a time (plus the set of
  memory ids and current keys seen, to refuse a file that repeats one).
* **All or nothing, without transactions.** An import writes every document
  with its ``import_id`` under a *hidden* scope (project ``importing:<id>``),
  which no read of the target sees. Only after the ``end`` line has been read
  and every line has passed does it *commit*: one ``update_many`` per
  collection moves the documents into the target scope, then the scope logs
  are bumped past their length so every process's exact-search cache reloads.
  A bad line (:class:`~mongomem.ltm.export_format.LineError` names its number),
  a file cut short, a storage failure or a cancellation rolls back: every
  document of that import is deleted, nothing of it stays. The job record
  (``memory_imports``: ``running`` → ``committing`` → ``done``, or
  ``rolled_back``) lets the next import of the same user finish a commit a
  crash interrupted, or roll back an import a crash left ``running``. One
  import per user at a time: a second one started meanwhile rolls the first back,
  which then fails at its commit (:class:`~mongomem.errors.StorageError`, retriable).
* **Idempotent, and blind to other tenants.** Ids are deterministic (the
  source's, or :func:`~mongomem.ltm.export_format.moved_id` of them; which of
  the two depends on the file and the target alone, see "Ids an import keeps"
  in :mod:`~mongomem.ltm.export_format`), and a memory the target already has
  (any version with its id, *in the target's scope*) is skipped whole, as is
  a decision-log entry already there. Every existence check reads the target's
  own scope: an id another tenant holds is, to this import, a fresh id, and
  nothing one tenant imports makes another's import skip anything. Importing
  the same file twice stores nothing new the second time, and an import never changes a memory the
  target has. A memory whose key is *current* in the target under another
  memory id is refused (naming the line): one key holds one current memory.
* **Embeddings.** Kept as exported when the target's embedder has the name and
  dimensions of the header's; otherwise every version's text is embedded again
  with the target's embedder (vectors of two embedders are not comparable).
  Keeping them is exact and costs no embedding calls.
* **Erasure.** An erased target user is refused (:class:`~mongomem.errors.Erased`):
  its id is retired. The register is read again just before the commit.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.embeddings import Embedder
from mongomem.adapters.mongo import DECISIONS, MEMORIES, SNAPSHOTS, Document
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import StorageError
from mongomem.ltm.documents import encode_embedding, scope_filter
from mongomem.ltm.export_format import (
    ExportHeader,
    LineError,
    MemoryGroup,
    check_decision,
    check_group,
    check_version,
    decision_line,
    end_line,
    header_line,
    moved_id,
    owns_memory_id,
    parse_header,
    parse_line,
    relocate_decision,
    relocate_group,
    rename_decision,
    rename_memory,
    version_line,
)
from mongomem.ltm.index import LOG_LENGTH, SCOPE_LOG, scope_log_id
from mongomem.ltm.kinds import normalize_key
from mongomem.models import CLOSED_STATUSES, Action, MemoryScope, MemoryStatus, utcnow

__all__ = [
    "CHUNK",
    "EXPORT_INDEX",
    "IMPORTS",
    "ExportResult",
    "ImportResult",
    "ensure_export_indexes",
    "export_lines",
    "import_lines",
]

Doc = dict[str, Any]
#: The job records of imports.
IMPORTS = "memory_imports"
#: Versions (or documents to write) handled together.
CHUNK = 200
EXPORT_INDEX = "scope_memory_version"
#: Where an imported version keeps the turn ids of evidence whose snapshot it lacks.
EVIDENCE_TURNS = "evidence_turns"


class ExportResult(BaseModel):
    """What an export wrote: its ``lines`` (header and end included), versions and
    decision-log entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: str
    user_id: str
    lines: int
    versions: int
    decisions: int


class ImportResult(BaseModel):
    """What an import stored: ``memories``/``versions``/``decisions`` written now;
    ``skipped`` memories (and ``decisions_skipped``) the target had already."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    import_id: str
    source_project_id: str
    source_user_id: str
    memories: int
    versions: int
    decisions: int
    skipped: int
    decisions_skipped: int
    re_embedded: bool


async def _run(op: Any) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB failed (memory export/import): {exc}") from exc


async def ensure_export_indexes(db: AsyncDatabase[Document]) -> None:
    """The indexes the export cursors are served by."""
    await _run(
        db[MEMORIES].create_index(
            [
                ("scope.project_id", ASCENDING),
                ("scope.user_id", ASCENDING),
                ("memory_id", ASCENDING),
                ("version", ASCENDING),
            ],
            name=EXPORT_INDEX,
        )
    )
    await _run(
        db[DECISIONS].create_index(
            [("scope.project_id", ASCENDING), ("scope.user_id", ASCENDING), ("_id", ASCENDING)],
            name="scope_id",
        )
    )
    await _run(db[MEMORIES].create_index("import_id", name="import_id", sparse=True))
    await _run(db[DECISIONS].create_index("import_id", name="import_id", sparse=True))


# -- export ------------------------------------------------------------------------------


async def export_lines(
    db: AsyncDatabase[Document],
    scope: MemoryScope,
    embedder: tuple[str, int] | None,
    *,
    version: str,
    now: datetime | None = None,
) -> AsyncIterator[str]:
    """The export of ``scope`` (a user's own scope), one line at a time (see the format)."""
    assert scope.user_id is not None
    yield header_line(scope.project_id, scope.user_id, embedder, now or utcnow(), version)
    where = scope_filter(scope.project_id, scope.user_id)
    versions = decisions = 0
    chunk: list[Doc] = []
    cursor = db[MEMORIES].find(
        where, sort=[("memory_id", ASCENDING), ("version", ASCENDING)], batch_size=CHUNK
    )
    try:
        async for doc in cursor:
            chunk.append(doc)
            if len(chunk) >= CHUNK:
                for line in await _version_lines(db, chunk):
                    yield line
                versions += len(chunk)
                chunk = []
        for line in await _version_lines(db, chunk):
            yield line
        versions += len(chunk)
        async for doc in db[DECISIONS].find(
            {"scope.project_id": scope.project_id, "scope.user_id": scope.user_id},
            sort=[("_id", ASCENDING)],
            batch_size=CHUNK,
        ):
            yield decision_line(doc)
            decisions += 1
    except PyMongoError as exc:
        raise StorageError(f"MongoDB failed while exporting: {exc}") from exc
    yield end_line(versions, decisions)


async def _version_lines(db: AsyncDatabase[Document], docs: list[Doc]) -> list[str]:
    refs = sorted(
        {
            e["ref"]
            for d in docs
            for e in d.get("evidence", ())
            if isinstance(e, dict) and e.get("source") == "snapshot"
        }
    )
    turns: dict[str, list[str]] = {}
    if refs:
        async for snap in db[SNAPSHOTS].find({"_id": {"$in": refs}}, {"turn_ids": 1}):
            turns[snap["_id"]] = [str(t) for t in snap.get("turn_ids", ())]
    lines = []
    for doc in docs:
        kept = doc.get(EVIDENCE_TURNS) or {}
        per = [
            turns.get(e.get("ref"), kept.get(e.get("ref"), []))
            if e.get("source") == "snapshot"
            else []
            for e in doc.get("evidence", ())
        ]
        lines.append(version_line({k: v for k, v in doc.items() if k != EVIDENCE_TURNS}, per))
    return lines


# -- import ------------------------------------------------------------------------------


class _Import:
    """One import's state while it reads lines (see the module docstring)."""

    def __init__(
        self,
        db: AsyncDatabase[Document],
        target: MemoryScope,
        embedder: Embedder | None,
        bson_vector: bool,
    ) -> None:
        self.db = db
        self.target = target
        self.embedder = embedder
        self.bson_vector = bson_vector
        self.import_id = uuid.uuid4().hex
        self.hidden = {"project_id": f"importing:{self.import_id}", "user_id": target.user_id}
        self.header: ExportHeader | None = None
        self.re_embed = False
        self.group: MemoryGroup | None = None
        self.pending: list[tuple[MemoryGroup, list[Doc]]] = []
        self.pending_decisions: list[tuple[int, Doc]] = []
        self.seen: set[str] = set()
        #: (type, normalized key) → first line, of the current memories this import adds.
        self.current_keys: dict[tuple[str, str], int] = {}
        #: What the target holds, read once (:meth:`_target_state`): memory ids, and the
        #: current (type, normalized key)s with their memories.
        self.target_ids: set[str] | None = None
        self.target_current: dict[tuple[str, str], Doc] = {}
        #: The memory types the target was found never to have written (no scope-log
        #: entry), while it was not read; ``None`` once it was read.
        self.unwritten: set[str] | None = set()
        #: ``_id`` of every document written, per collection (the commit moves these).
        self.written: dict[str, list[Any]] = {MEMORIES: [], DECISIONS: []}
        #: Memory ids of the file stored under another id (see the module docstring).
        self.renamed: dict[str, str] = {}
        self.same_scope = False
        self.types: set[str] = set()
        self.deleted: dict[str, int] = {}
        self.read_versions = self.read_decisions = 0
        self.memories = self.versions = self.skipped = 0
        self.decisions = self.decisions_skipped = 0

    # -- reading -----------------------------------------------------------------------

    async def take(self, number: int, raw: bytes | str) -> bool:
        """Take line ``number``; ``True`` once it was the ``end`` line."""
        kind, obj = parse_line(raw, number)
        if self.header is None:
            if kind != "header":
                raise LineError(number, "the first line must be the export's header")
            self.header = parse_header(obj, number)
            self.same_scope = self.header.scope == self.target
            if self.embedder is not None:
                mine = (self.embedder.name, self.embedder.dimensions)
                self.re_embed = self.header.embedder != mine
            return False
        source = self.header.scope
        if kind == "header":
            raise LineError(number, "a second header")
        if kind == "version":
            if self.read_decisions:
                raise LineError(number, "a version after the decision-log entries")
            dims = None if self.header.embedder is None else self.header.embedder[1]
            doc = check_version(obj, number, source, dims)
            self.read_versions += 1
            memory_id = str(doc["memory_id"])
            if self.group is None or self.group.memory_id != memory_id:
                await self._close_group()
                if memory_id in self.seen:
                    raise LineError(number, f"the versions of memory {memory_id} are not together")
                self.seen.add(memory_id)
                self.group = MemoryGroup(memory_id, number)
            self.group.docs.append(doc)
            self.group.turn_ids.append(obj["turn_ids"])
            return False
        await self._close_group()
        await self._flush_versions()
        if kind == "decision":
            doc = check_decision(obj, number, source)
            self.read_decisions += 1
            self.pending_decisions.append((number, relocate_decision(doc, source, self.target)))
            if len(self.pending_decisions) >= CHUNK:
                await self._flush_decisions()
            return False
        await self._flush_decisions()
        if (obj.get("versions"), obj.get("decisions")) != (self.read_versions, self.read_decisions):
            raise LineError(
                number,
                f"the end line counts {obj.get('versions')} versions and {obj.get('decisions')} "
                f"decisions; the file has {self.read_versions} and {self.read_decisions}",
            )
        return True

    async def _close_group(self) -> None:
        group, self.group = self.group, None
        if group is None:
            return
        check_group(group)
        assert self.header is not None
        docs = relocate_group(group, self.header.scope, self.target)
        if self.re_embed and self.embedder is not None:
            live = [d for d in docs if d.get("action") not in (Action.DELETE, Action.EXPIRE)]
            if live:
                vectors = await self.embedder.embed([str(d["text"]) for d in live])
                for d, v in zip(live, vectors, strict=True):
                    d["embedding"] = encode_embedding(v, bson_vector=self.bson_vector)
        for doc, turn_ids in zip(docs, group.turn_ids, strict=True):
            doc["key_norm"] = normalize_key(str(doc["key"]))
            doc["import_id"] = self.import_id
            doc["scope"] = self.hidden
            kept = {
                e["ref"]: ids
                for e, ids in zip(doc.get("evidence", ()), turn_ids, strict=True)
                if ids
                and isinstance(e.get("ref"), str)
                and "." not in e["ref"]
                and not e["ref"].startswith("$")
            }
            if kept:
                doc[EVIDENCE_TURNS] = kept
        self.pending.append((group, docs))
        if sum(len(d) for _, d in self.pending) >= CHUNK:
            await self._flush_versions()

    async def _target_state(
        self, types: Iterable[str], *, again: bool = False
    ) -> tuple[set[str], dict[tuple[str, str], Doc]]:
        """The target's memory ids and current keys of ``types`` (the memory types the
        import has read; a clash or a shared memory id is of one type): none, without
        reading ``memories``, when the target's scope logs of these types do not exist —
        every write of a scope creates or bumps its log entry (:mod:`mongomem.ltm.index`),
        so the target never wrote them; else one read of the target's scope. ``again``
        asks the scope logs of every type of ``types`` again (not only those not asked).

        Asked once per import (and once more before the commit, for a key that
        became current meanwhile), not per chunk: a per-chunk query by
        ``memory_id`` ``$in`` and by key ``$or`` is a scan of the whole collection
        on a server that answers only ``_id`` and unique-index shapes from an
        index (mongo-java-server), so an import cost grew with the store (issue 28).
        On MongoDB this read is served by the scope prefix of ``scope_type_status_key``.
        """
        ids: set[str] = set()
        current: dict[tuple[str, str], Doc] = {}
        wanted = set(types)
        if self.unwritten is not None:
            ask = wanted if again else wanted - self.unwritten
            logs = [scope_log_id(self.target, t) for t in sorted(ask)]
            found = None
            if logs:
                found = await _run(self.db[SCOPE_LOG].find_one({"_id": {"$in": logs}}, {"_id": 1}))
            if found is None:
                self.unwritten |= wanted
                return ids, current
            self.unwritten = None
        cursor = self.db[MEMORIES].find(
            scope_filter(self.target.project_id, self.target.user_id),
            {"memory_id": 1, "memory_type": 1, "key_norm": 1, "key": 1, "status": 1, "_id": 0},
        )
        try:
            async for d in cursor:
                ids.add(str(d["memory_id"]))
                if d.get("status") == MemoryStatus.CURRENT.value:
                    current[(str(d.get("memory_type")), str(d.get("key_norm")))] = d
        except PyMongoError as exc:
            raise StorageError(f"MongoDB failed (memory export/import): {exc}") from exc
        return ids, current

    def _refuse_clash(self, current: dict[tuple[str, str], Doc]) -> None:
        """A current key of the target that this import also adds: the line that adds it."""
        for key, first_line in self.current_keys.items():
            clash = current.get(key)
            if clash is not None:
                raise LineError(
                    first_line,
                    f"the user already has a current {clash['memory_type']} memory with key "
                    f"{clash['key']!r} (memory {clash['memory_id']}); delete it first, or import "
                    "into another user",
                )

    def _owned(self, docs: list[Doc]) -> bool:
        """Whether the memory id of ``docs`` may be kept as the file has it (module doc)."""
        first = docs[0]
        return not self.same_scope or owns_memory_id(
            self.target, str(first["memory_type"]), str(first["key"]), str(first["memory_id"])
        )

    async def _held_decisions(self, ids: Iterable[str]) -> set[str]:
        """Which decision ids the target's own scope already holds (never another scope's).

        Asked by ``_id`` alone, which every server answers from its ``_id`` index (a
        scope-and-``_id`` filter is a scan of the collection on mongo-java-server), and
        the scope compared here: another scope's document is as if absent.
        """
        cursor = self.db[DECISIONS].find({"_id": {"$in": list(ids)}}, {"scope": 1})
        mine = {"project_id": self.target.project_id, "user_id": self.target.user_id}
        return {
            str(d["_id"])
            async for d in cursor
            if {k: (d.get("scope") or {}).get(k) for k in mine} == mine
        }

    async def _flush_versions(self) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        memories = self.db[MEMORIES]
        types = {str(d["memory_type"]) for _, docs in pending for d in docs}
        if self.target_ids is None or (
            self.unwritten is not None and not types <= self.unwritten
        ):  # read once; or asked of the scope logs again for a type not asked yet
            self.target_ids, self.target_current = await self._target_state(
                types | (self.unwritten or set())
            )
        aliases = {
            str(docs[0]["memory_id"]): moved_id(self.target, str(docs[0]["memory_id"]))
            for _, docs in pending
            if not self._owned(docs)
        }
        # What the target's own scope holds, read once (never another scope's ids).
        asked = [str(docs[0]["memory_id"]) for _, docs in pending] + list(aliases.values())
        there = {i for i in asked if i in self.target_ids}
        new: list[tuple[MemoryGroup, list[Doc]]] = []
        for group, docs in pending:
            raw = str(docs[0]["memory_id"])
            if raw in there:
                continue  # the target has it already: skipped whole
            alias = aliases.get(raw)
            if alias is not None:
                self.renamed[raw] = alias
                if alias in there:
                    continue
                docs = rename_memory(docs, alias)
            new.append((group, docs))
        self.skipped += len(pending) - len(new)
        wanted: dict[tuple[str, str], MemoryGroup] = {}
        for group, docs in new:
            last = docs[-1]
            if last["status"] != MemoryStatus.CURRENT:
                continue
            key = (str(last["memory_type"]), str(last["key_norm"]))
            if key in self.current_keys or key in wanted:
                raise LineError(
                    group.first_line, f"a second current {key[0]} memory with key {last['key']!r}"
                )
            wanted[key] = group
        self.current_keys.update({k: g.first_line for k, g in wanted.items()})
        self._refuse_clash(self.target_current)
        docs_out = [d for _, docs in new for d in docs]
        if docs_out:
            await _run(memories.insert_many(docs_out, ordered=False))
            self.written[MEMORIES].extend(d["_id"] for d in docs_out)
        for _, docs in new:
            self.types.add(str(docs[-1]["memory_type"]))
            if docs[-1]["status"] in CLOSED_STATUSES:
                t = str(docs[-1]["memory_type"])
                self.deleted[t] = self.deleted.get(t, 0) + 1
        self.memories += len(new)
        self.versions += len(docs_out)

    async def recheck(self) -> None:
        """Before the commit: refuse a key that became current in the target meanwhile."""
        if self.current_keys:
            self._refuse_clash((await self._target_state(self.types, again=True))[1])

    async def _flush_decisions(self) -> None:
        pending, self.pending_decisions = self.pending_decisions, []
        if not pending:
            return
        decisions = self.db[DECISIONS]
        ids = [str(d["_id"]) for _, d in pending]
        aliases = {i: moved_id(self.target, i) for i in ids} if self.same_scope else {}
        there = await _run(self._held_decisions([*ids, *aliases.values()]))
        new = []
        for _, doc in pending:
            raw = str(doc["_id"])
            if raw in there or aliases.get(raw) in there:
                continue
            if raw in aliases:
                doc = rename_decision(doc, aliases[raw], lambda m: self.renamed.get(m, m))
            new.append({**doc, "scope": self.hidden, "import_id": self.import_id})
        self.decisions_skipped += len(pending) - len(new)
        if new:
            await _run(decisions.insert_many(new, ordered=False))
            self.written[DECISIONS].extend(d["_id"] for d in new)
        self.decisions += len(new)

    # -- the job -----------------------------------------------------------------------

    def result(self) -> ImportResult:
        assert self.header is not None
        return ImportResult(
            import_id=self.import_id,
            source_project_id=self.header.project_id,
            source_user_id=self.header.user_id,
            memories=self.memories,
            versions=self.versions,
            decisions=self.decisions,
            skipped=self.skipped,
            decisions_skipped=self.decisions_skipped,
            re_embedded=self.re_embed,
        )


def _target_of(job: Doc) -> MemoryScope:
    return MemoryScope(project_id=job["project_id"], user_id=job["user_id"])


async def _commit(db: AsyncDatabase[Document], job: Doc) -> None:
    """Move an import's documents into its target scope; idempotent (a crash resumes it).

    ``job["written"]`` (the ``_id`` of every document the import wrote, per
    collection; not stored) moves them by ``_id`` in batches of :data:`CHUNK`,
    which every server answers from its ``_id`` index; without it (a commit a
    crash interrupted) they are found by ``import_id``.
    """
    target = _target_of(job)
    written: dict[str, list[Any]] | None = job.get("written")
    await _run(db[IMPORTS].update_one({"_id": job["_id"]}, {"$set": {"state": "committing"}}))
    move = {"$set": {"scope": target.model_dump()}, "$unset": {"import_id": ""}}
    for coll in (MEMORIES, DECISIONS):
        if written is None:
            await _run(db[coll].update_many({"import_id": job["_id"]}, move))
            continue
        ids = written[coll]
        for i in range(0, len(ids), CHUNK):
            await _run(db[coll].update_many({"_id": {"$in": ids[i : i + CHUNK]}}, move))
    deleted: dict[str, int] = job.get("deleted", {})
    for memory_type in job.get("types", []):
        inc = {"rev": LOG_LENGTH + 1, "deletes": int(deleted.get(memory_type, 0))}
        await _run(
            db[SCOPE_LOG].update_one(
                {"_id": scope_log_id(target, memory_type)},
                {"$inc": inc, "$set": {"log": []}},
                upsert=True,
            )
        )
    await _run(
        db[IMPORTS].update_one(
            {"_id": job["_id"]}, {"$set": {"state": "done", "finished_at": utcnow()}}
        )
    )


async def _roll_back(db: AsyncDatabase[Document], import_id: str, error: str) -> None:
    await _run(db[MEMORIES].delete_many({"import_id": import_id}))
    await _run(db[DECISIONS].delete_many({"import_id": import_id}))
    await _run(
        db[IMPORTS].update_one(
            {"_id": import_id},
            {"$set": {"state": "rolled_back", "error": error[:2000], "finished_at": utcnow()}},
        )
    )


async def _settle_unfinished(db: AsyncDatabase[Document], target: MemoryScope) -> None:
    """Finish the commit of an import to ``target`` that a crash interrupted; roll back one
    that was still reading (or running now: one import per user at a time)."""
    jobs = await _run(
        db[IMPORTS]
        .find(
            {
                "project_id": target.project_id,
                "user_id": target.user_id,
                "state": {"$in": ["running", "committing"]},
            }
        )
        .to_list()
    )
    for job in jobs:
        if job["state"] == "committing":
            await _commit(db, job)
        else:
            await _roll_back(db, job["_id"], "rolled back by a later import of the same user")


async def import_lines(
    db: AsyncDatabase[Document],
    target: MemoryScope,
    lines: AsyncIterable[bytes | str],
    *,
    embedder: Embedder | None,
    register: ErasureRegister,
    bson_vector: bool = False,
) -> ImportResult:
    """Import an export into ``target`` (a user's own scope), all or nothing (module doc).

    ``embedder`` is the target's: with another name or size than the header's,
    every version is embedded again with it (``None``: vectors are kept).
    """
    assert target.user_id is not None
    await register.refuse_erased(target.project_id, target.user_id, None)
    await _settle_unfinished(db, target)
    job = _Import(db, target, embedder, bson_vector)
    await _run(
        db[IMPORTS].insert_one(
            {
                "_id": job.import_id,
                "project_id": target.project_id,
                "user_id": target.user_id,
                "state": "running",
                "started_at": utcnow(),
            }
        )
    )
    number = 0
    try:
        ended = False
        async for raw in lines:
            number += 1
            if ended:
                if raw.strip():
                    raise LineError(number, "a line after the end line")
                continue
            if not raw.strip():
                continue
            ended = await job.take(number, raw)
        if not ended:
            raise LineError(number + 1, "the export ends without its end line (cut short?)")
        await register.refuse_erased(target.project_id, target.user_id, None)
        record = {"types": sorted(job.types), "deleted": job.deleted}
        still = await _run(
            db[IMPORTS].update_one({"_id": job.import_id, "state": "running"}, {"$set": record})
        )
        if not still.matched_count:
            raise StorageError(
                "another import of this user rolled this one back (one import per user at "
                "a time); run it again"
            )
        await job.recheck()
        await _commit(
            db,
            {
                "_id": job.import_id,
                "project_id": target.project_id,
                "user_id": target.user_id,
                **record,
                "written": job.written,
            },
        )
    except BaseException as exc:
        try:
            if (await _run(db[IMPORTS].find_one({"_id": job.import_id}, {"state": 1})) or {}).get(
                "state"
            ) != "committing":
                await _roll_back(db, job.import_id, f"{type(exc).__name__}: {exc}")
        except StorageError:
            pass  # the next import of this user rolls it back (its job is still running)
        raise
    return job.result()
