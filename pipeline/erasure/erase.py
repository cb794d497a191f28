"""Erasing a user, a session or a project (SPEC J2), replay-proof (J3).

**The register.** ``erasures`` holds one document per erasure, ``_id`` =
:func:`erasure_id` of its target — ``(project)``, ``(project, user)`` or
``(project, user, session)``. It is written *first*, and every writer asks
:class:`ErasureRegister` before it writes: ``record_turn`` / ``end_session``
and direct saves refuse (:class:`~mongomem.errors.Erased`, 403), the windowing
stage drops the turns and window states of erased sessions and never delivers
their snapshots, the extractors skip their snapshots (no LLM call, no usage, no
progress entry) and the reconciler skips their candidates. So a replay or
backfill of the turns topic (or of snapshots or candidates) from offset 0
brings nothing back. An erased id stays retired: its sessions' seq numbers
would restart at 1 and collide with what Kafka still holds.

A check is one ``find`` by ``_id`` over the (at most three) targets that
cover a session; a positive answer is cached for good (an erasure is never
undone), a negative one is not.

**The job.** The register document is also the erasure's job record:
``state`` is ``running`` until every step is done, then ``done``. Every step
is an idempotent delete or update, so running the erasure again — after a
crash, a SIGKILL, or from :func:`resume_erasures` — completes it. Steps, in an
order that keeps what later steps need until they are done:

1. the reconciler-ledger entries of the erased candidates (found through the
   decision log and the memories' candidate ids);
2. memories: those in the erased user's own scope are removed with all
   versions; project-scoped ones (and, for a session, the user's) follow the
   lineage rule of :mod:`mongomem.erasure.prune`;
3. decision-log entries, processing-status entries, LLM usage records of the
   erased snapshots (and the judge calls of the target's direct saves), the stored
   extraction answers (``extraction_results``, by project / user / session);
4. snapshots, then turns;
5. tombstones for the erased sessions' window states, written to the windowing
   changelog by the ``on_sessions`` hook (the CLI passes one; see the README),
   and the scope logs of the touched scopes are bumped past their log so every
   process's exact-search cache reloads;
6. the job is marked ``done``; a second sweep of steps 1–4 before that catches
   a write that had checked the register just before it was written. The
   second sweep starts no sooner than
   :data:`~mongomem.erasure.register.NOT_ERASED_TTL_S` after the register was
   written: that is how long short-term memory relies on a "not erased"
   answer, so every turn written on one read before the register is in the
   database by then.

An erasure whose target has no data at all (and no running job) changes
nothing and says so (:attr:`ErasureResult.erased` is ``False``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import (
    CHECKPOINTS,
    DECISIONS,
    EXTRACTIONS,
    LEDGER,
    MEMORIES,
    SNAPSHOTS,
    TURN_VECTORS,
    TURNS,
    Document,
)
from mongomem.erasure.prune import VersionFacts, prune
from mongomem.erasure.register import ERASURES, NOT_ERASED_TTL_S, ErasureRegister, erasure_id
from mongomem.errors import InputError, StorageError
from mongomem.ltm.index import LOG_LENGTH, SCOPE_LOG, scope_log_id
from mongomem.ltm.plan import evidence_rank
from mongomem.ltm.writes import HEAD, OBSERVED_RANK
from mongomem.models import BUILTIN_MEMORY_TYPES, Evidence, MemoryScope, SessionKey, utcnow
from mongomem.operations.progress import PROGRESS

__all__ = [
    "ERASURES",
    "ErasureRegister",
    "ErasureResult",
    "SessionsHook",
    "StepHook",
    "Target",
    "erase",
    "erasure_id",
    "relied_answers_expired",
    "require_confirmation",
    "resume_erasures",
]

Doc = dict[str, Any]
#: :data:`mongomem.operations.usage.LLM_USAGE`, named here: that module needs the ``metrics`` extra,
#: and erasing must work with the core package alone.
LLM_USAGE = "llm_usage"
#: Time allowed, past :data:`NOT_ERASED_TTL_S`, for a write sent on a "not erased" answer
#: to land before the second sweep.
_LANDING_S = 1.0
#: Ids per delete (and per read of a batch of memories' versions) of a sweep. Small:
#: mongo-java-server matches each document it finds against the whole ``$in`` list, so
#: a delete of n ids costs n × batch comparisons (4,000 in one list took 6.6 s).
DELETE_BATCH = 100
#: Delete batches of one collection in flight at once (their round trips overlap).
DELETES_AT_ONCE = 4
Kind = Literal["user", "session", "project"]
#: Called with the erased sessions once their data is gone (e.g. changelog tombstones).
SessionsHook = Callable[[Sequence[SessionKey]], Awaitable[None]]
#: Called between steps with the step's name (tests inject a crash here).
StepHook = Callable[[str], Awaitable[None]]


class Target(BaseModel):
    """What an erasure removes: a project, one user of it, or one session of a user."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: str
    user_id: str | None = None
    session_id: str | None = None

    @property
    def kind(self) -> Kind:
        if self.user_id is None:
            return "project"
        return "user" if self.session_id is None else "session"

    def whose(self) -> Doc:
        """The filter of the target's turns, snapshots and progress entries."""
        f: Doc = {"project_id": self.project_id}
        if self.user_id is not None:
            f["user_id"] = self.user_id
        if self.session_id is not None:
            f["session_id"] = self.session_id
        return f

    def describe(self) -> str:
        if self.kind == "project":
            return f"project {self.project_id!r}"
        if self.kind == "user":
            return f"user {self.user_id!r} of project {self.project_id!r}"
        return f"session {self.session_id!r} of user {self.user_id!r} ({self.project_id!r})"


class ErasureResult(BaseModel):
    """What an erasure did: ``erased`` is ``False`` when there was nothing to erase."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    project_id: str
    user_id: str | None = None
    session_id: str | None = None
    erased: bool
    #: Documents removed (or, for memories kept, changed) per collection.
    removed: dict[str, int]
    #: Memories kept with fewer evidence items, and those that fell back to an older version.
    memories_pruned: int = 0
    memories_reverted: int = 0
    message: str


def require_confirmation(confirm: bool) -> None:
    """Erasing is irreversible: refuse unless ``confirm`` is exactly ``True``."""
    if confirm is not True:
        raise InputError(
            "erasing is irreversible: pass confirm=True (the CLI: --yes)", field="confirm"
        )


async def _run(op: Awaitable[Any]) -> Any:
    try:
        return await op
    except PyMongoError as exc:
        raise StorageError(f"MongoDB operation failed during an erasure: {exc}") from exc


async def _has_data(db: AsyncDatabase[Document], target: Target) -> bool:
    """Whether there is anything of ``target`` (or of it, some part already erased).

    Cheapest first: the register (a part of the target already erased), then — for a
    user — the scope logs of its own memories by ``_id`` (every write of a scope
    creates its log, :mod:`mongomem.ltm.index`), which every server answers from its
    ``_id`` index; only a target with neither is looked for in snapshots, turns and
    memories (filters mongo-java-server answers by a scan of the collection).
    """
    if await _run(db[ERASURES].find_one(target.whose(), {"_id": 1})) is not None:
        return True
    if target.kind == "user":
        scope = MemoryScope(project_id=target.project_id, user_id=target.user_id)
        logs = [scope_log_id(scope, t) for t in BUILTIN_MEMORY_TYPES]
        if await _run(db[SCOPE_LOG].find_one({"_id": {"$in": logs}}, {"_id": 1})) is not None:
            return True
    for coll in (SNAPSHOTS, TURNS):
        if await _run(db[coll].find_one(target.whose(), {"_id": 1})) is not None:
            return True
    memories: Doc = {"scope.project_id": target.project_id}
    if target.user_id is not None:
        memories["$or"] = [{"scope.user_id": target.user_id}, {"evidence.user_id": target.user_id}]
        if target.session_id is not None:
            memories["evidence.session_id"] = target.session_id
    return await _run(db[MEMORIES].find_one(memories, {"_id": 1})) is not None


class _Erasure:
    """One run of the steps for one target (module docstring)."""

    def __init__(self, db: AsyncDatabase[Document], target: Target, step: StepHook | None) -> None:
        self.db, self.t, self._step = db, target, step
        self.removed: dict[str, int] = {}
        self.pruned = self.reverted = 0
        self.sessions: set[SessionKey] = set()
        self.scopes: set[tuple[str | None, str]] = set()

    async def checkpoint(self, name: str) -> None:
        await _run(
            self.db[ERASURES].update_one(
                {"_id": erasure_id(self.t.project_id, self.t.user_id, self.t.session_id)},
                {"$addToSet": {"steps": name}},
            )
        )
        if self._step is not None:
            await self._step(name)

    def count(self, coll: str, n: int) -> None:
        self.removed[coll] = self.removed.get(coll, 0) + n

    def evidence_erased(self, snapshot_ids: set[str]) -> Callable[[Doc], bool]:
        t = self.t

        def erased(e: Doc) -> bool:
            if t.kind == "project" or e.get("ref") in snapshot_ids:
                return True
            if e.get("user_id") != t.user_id:
                return False
            return t.session_id is None or e.get("session_id") == t.session_id

        return erased

    def own_scope(self) -> Doc | None:
        """The memories removed whole: the project's, or the erased user's own."""
        if self.t.kind == "project":
            return {"scope.project_id": self.t.project_id}
        if self.t.kind == "user":
            return {"scope.project_id": self.t.project_id, "scope.user_id": self.t.user_id}
        return None

    def lineage_filter(self, snapshot_ids: set[str]) -> Doc:
        """The versions the lineage rule must look at (outside :meth:`own_scope`)."""
        t = self.t
        mine: Doc = {"evidence.user_id": t.user_id}
        if t.session_id is not None:
            mine["evidence.session_id"] = t.session_id
        ors: list[Doc] = [mine]
        if snapshot_ids:
            ors.append({"evidence.ref": {"$in": sorted(snapshot_ids)}})
        if t.session_id is not None:  # direct saves from before evidence named its user
            ors.append({"scope.user_id": t.user_id, "evidence.session_id": t.session_id})
        f: Doc = {"scope.project_id": t.project_id, "$or": ors}
        if t.kind == "user":
            f["scope.user_id"] = {"$ne": t.user_id}
        return f

    def memories_filter(self, snapshot_ids: set[str]) -> Doc:
        """One read a sweep of every memory it touches: :meth:`own_scope` and
        :meth:`lineage_filter` in one ``$or`` (one scan of the collection on a server
        that serves no other index shape, mongo-java-server, instead of two)."""
        own, lineage = self.own_scope(), self.lineage_filter(snapshot_ids)
        if own is None:
            return lineage
        if self.t.kind == "project":
            return own
        ors = [{"scope.user_id": self.t.user_id}, *lineage["$or"]]
        return {"scope.project_id": self.t.project_id, "$or": ors}

    def is_own(self, m: Doc) -> bool:
        """Whether ``m`` (read by :meth:`memories_filter`) is in :meth:`own_scope`."""
        if self.t.kind == "project":
            return True
        return self.t.kind == "user" and (m.get("scope") or {}).get("user_id") == self.t.user_id

    async def sweep(self) -> None:
        """Steps 1–4 once (module docstring).

        Reads that do not need each other's answers go out together (the target's
        snapshots and turns; then its decisions and memories), and the deletes of a
        step too: on a server that answers a filter by the user with a scan
        (mongo-java-server), the scans overlap instead of queueing (issue 28).
        """
        db, t = self.db, self.t
        whose = t.whose()
        fields = {"_id": 1, "project_id": 1, "user_id": 1, "session_id": 1}
        snaps, turns = await asyncio.gather(
            _run(db[SNAPSHOTS].find(whose, fields).to_list()),
            _run(db[TURNS].find(whose, {"_id": 1, "session_id": 1}).to_list()),
        )
        snapshot_ids = {str(s["_id"]) for s in snaps}
        for s in snaps:
            self.sessions.add(
                SessionKey(
                    project_id=s["project_id"], user_id=s["user_id"], session_id=s["session_id"]
                )
            )
        for s in {str(d["session_id"]) for d in turns}:
            if t.user_id is not None:
                self.sessions.add(
                    SessionKey(project_id=t.project_id, user_id=t.user_id, session_id=s)
                )
        if self.sessions:  # kept in the job: a resumed erasure still knows them
            await _run(
                db[ERASURES].update_one(
                    {"_id": erasure_id(t.project_id, t.user_id, t.session_id)},
                    {
                        "$addToSet": {
                            "sessions": {
                                "$each": [
                                    [k.project_id, k.user_id, k.session_id] for k in self.sessions
                                ]
                            }
                        }
                    },
                )
            )
        erased = self.evidence_erased(snapshot_ids)
        # -- 1: the erased candidates, and their ledger entries
        dec_filter: Doc = {"scope.project_id": t.project_id}
        if t.kind != "project":
            dec_filter["$or"] = [
                *([{"evidence.ref": {"$in": sorted(snapshot_ids)}}] if snapshot_ids else []),
                {
                    "evidence.user_id": t.user_id,
                    **({} if t.session_id is None else {"evidence.session_id": t.session_id}),
                },
                *([{"scope.user_id": t.user_id}] if t.kind == "user" else []),
            ]
        fields = {"candidate_ids": 1, "memory_type": 1, "scope.user_id": 1, "memory_id": 1}
        decisions, touched = await asyncio.gather(
            _run(db[DECISIONS].find(dec_filter, {"_id": 1}).to_list()),
            _run(db[MEMORIES].find(self.memories_filter(snapshot_ids), fields).to_list()),
        )
        cids = {str(d["_id"]) for d in decisions}  # the filter matches only erased decisions
        owned = [m for m in touched if self.is_own(m)]
        lineage = sorted({str(m["memory_id"]) for m in touched if not self.is_own(m)})
        for m in owned:  # one read: the candidates, the scopes, and what to delete
            cids.update(m.get("candidate_ids", ()))
        if cids:
            await self.delete_ids(LEDGER, sorted(cids))
        await self.checkpoint("ledger")
        # -- 2: memories
        if owned:
            for m in owned:
                memory_type = str(m.get("memory_type"))
                self.scopes.add((None, memory_type))  # project scope, if any
                self.scopes.add(((m.get("scope") or {}).get("user_id"), memory_type))
            await self.delete_ids(MEMORIES, [m["_id"] for m in owned])
        if lineage:
            await self.prune_memories(lineage, erased, cids)
        await self.checkpoint("memories")
        # -- 3: decision log, progress, usage
        usage: Doc = (  # a direct save's judge calls name their user and session instead
            {"project_id": t.project_id}
            if t.kind == "project"
            else {"$or": [{"snapshot_id": {"$in": sorted(snapshot_ids)}}, whose]}
        )
        derived: list[Awaitable[None]] = [
            self.delete_where(PROGRESS, whose),
            self.delete_where(LLM_USAGE, usage),
            self.delete_where(EXTRACTIONS, whose),  # stored LLM answers (SPEC I6)
        ]
        if cids:
            derived.append(self.delete_ids(DECISIONS, sorted(cids)))
        if t.kind == "project":
            derived.append(self.delete_where(DECISIONS, {"scope.project_id": t.project_id}))
        await asyncio.gather(*derived)
        await self.checkpoint("derived")
        # -- 4: snapshots, then turns
        await self.delete_ids(SNAPSHOTS, sorted(snapshot_ids))
        await asyncio.gather(
            # turn search's embeddings are derived from the turns: they go with them
            self.delete_where(TURN_VECTORS, whose),
            self.delete_ids(TURNS, [d["_id"] for d in turns]),
            # the watcher's per-session high-water marks (it writes none for erased sessions)
            self.delete_where(CHECKPOINTS, {**whose, "kind": "watcher-mark"}),
        )
        await self.checkpoint("turns")

    async def delete_where(self, coll: str, f: Doc) -> None:
        r = await _run(self.db[coll].delete_many(f))
        self.count(coll, r.deleted_count)

    async def delete_ids(self, coll: str, ids: Sequence[Any]) -> None:
        """Delete these documents of ``coll`` by ``_id``, :data:`DELETE_BATCH` at a time
        (:data:`DELETES_AT_ONCE` batches in flight).

        What a sweep read is deleted by its ``_id`` (which every server's ``_id``
        index serves) rather than by the sweep's filter again (a second scan
        on a server that serves no other index shape, mongo-java-server). A
        document written after the read is the second sweep's: nothing can be
        written for the target by then (module docstring).
        """
        gate = asyncio.Semaphore(DELETES_AT_ONCE)

        async def one(batch: list[Any]) -> None:
            async with gate:
                r = await _run(self.db[coll].delete_many({"_id": {"$in": batch}}))
            self.count(coll, r.deleted_count)

        batches = [list(ids[i : i + DELETE_BATCH]) for i in range(0, len(ids), DELETE_BATCH)]
        await asyncio.gather(*(one(b) for b in batches))

    async def prune_memories(
        self, memory_ids: list[str], erased: Callable[[Doc], bool], cids: set[str]
    ) -> None:
        """Apply the lineage rule (:mod:`mongomem.erasure.prune`) to these memories."""
        db = self.db
        now = utcnow()
        versions: dict[str, list[Doc]] = {}
        for i in range(0, len(memory_ids), DELETE_BATCH):  # every version, in one read a batch
            batch = memory_ids[i : i + DELETE_BATCH]
            for doc in await _run(
                db[MEMORIES].find({"memory_id": {"$in": batch}}, {"embedding": 0}).to_list()
            ):
                versions.setdefault(str(doc["memory_id"]), []).append(doc)
        for memory_id in memory_ids:
            docs = versions.get(str(memory_id), [])
            if not docs:
                continue
            by_version = {int(d["version"]): d for d in docs}
            facts = [
                VersionFacts(
                    version=v,
                    status=str(d.get("status")),
                    evidence=tuple(d.get("evidence", ())),
                    candidate_ids=tuple(d.get("candidate_ids", ())),
                )
                for v, d in by_version.items()
            ]
            plan = prune(facts, erased, cids, rank=evidence_order)
            if plan.untouched:
                continue
            first = docs[0]
            scope = first["scope"]
            self.scopes.add((scope.get("user_id"), str(first["memory_type"])))
            ops: list[Any] = []
            for v, (evidence, ids) in plan.changed.items():
                if v not in plan.removed:
                    update = {
                        "evidence": list(evidence),
                        "candidate_ids": list(ids),
                        OBSERVED_RANK: evidence_order(evidence),  # its latest surviving
                    }
                    ops.append(UpdateOne({"_id": by_version[v]["_id"]}, {"$set": update}))
            if plan.reverted_to is not None:
                target = by_version[plan.reverted_to]
                remaining = [v for v in by_version if v not in plan.removed]
                highest = max(remaining)
                head: Doc = (
                    {"$set": {HEAD: highest}}
                    if highest > plan.reverted_to
                    else {"$unset": {HEAD: ""}}
                )
                ops.append(
                    UpdateOne(
                        {"_id": target["_id"]},
                        {
                            "$set": {
                                "status": "current",
                                "updated_at": now,
                                **head.get("$set", {}),
                            },
                            "$unset": {
                                "superseded_at": "",
                                "superseded_by": "",
                                **head.get("$unset", {}),
                            },
                        },
                    )
                )
                for v in plan.demoted:  # kept, but no longer the latest statement
                    ops.append(
                        UpdateOne(
                            {"_id": by_version[v]["_id"]},
                            {
                                "$set": {
                                    "status": "superseded",
                                    "superseded_at": now,
                                    "superseded_by": target["_id"],
                                },
                                "$unset": {HEAD: ""},
                            },
                        )
                    )
                self.reverted += 1
            if ops:
                await _run(db[MEMORIES].bulk_write(ops, ordered=True))
            if plan.removed:
                ids_ = [by_version[v]["_id"] for v in plan.removed]
                r = await _run(db[MEMORIES].delete_many({"_id": {"$in": ids_}}))
                self.count(MEMORIES, r.deleted_count)
            if not plan.delete_all:
                self.pruned += 1

    async def reload_caches(self) -> None:
        """Bump the touched scope logs past their log: every cache reloads those scopes."""
        log = self.db[SCOPE_LOG]
        t = self.t
        for user, memory_type in self.scopes:
            scope = MemoryScope(project_id=t.project_id, user_id=user)
            await _run(
                log.update_one(
                    {"_id": scope_log_id(scope, memory_type)},
                    {"$inc": {"rev": LOG_LENGTH + 1}, "$set": {"log": []}},
                )
            )


def evidence_order(evidence: Sequence[Doc]) -> str:
    """The evidence rank (:func:`~mongomem.ltm.plan.evidence_rank`) of a version's latest
    stored evidence item; ``""`` for none (or none readable)."""
    ranks = []
    for item in evidence:
        try:
            ranks.append(evidence_rank(Evidence.model_validate(item)))
        except ValueError:
            continue  # not readable as evidence: it does not order the version
    return max(ranks, default="")


async def relied_answers_expired(registered: float) -> None:
    """Return once no writer relies on a "not erased" answer read before ``registered``
    (a :func:`time.monotonic` time): :data:`NOT_ERASED_TTL_S` after it, plus the time a
    write sent on such an answer takes to land."""
    wait_s = NOT_ERASED_TTL_S + _LANDING_S - (time.monotonic() - registered)
    if wait_s > 0:
        await asyncio.sleep(wait_s)


async def erase(
    db: AsyncDatabase[Document],
    target: Target,
    *,
    actor: str,
    on_sessions: SessionsHook | None = None,
    on_step: StepHook | None = None,
) -> ErasureResult:
    """Erase ``target`` (module docstring); run again, it completes an interrupted erasure."""
    register = db[ERASURES]
    rid = erasure_id(target.project_id, target.user_id, target.session_id)
    job = await _run(register.find_one({"_id": rid}))
    if job is None and not await _has_data(db, target):
        return ErasureResult(
            kind=target.kind,
            project_id=target.project_id,
            user_id=target.user_id,
            session_id=target.session_id,
            erased=False,
            removed={},
            message=f"nothing to erase: no data for {target.describe()}",
        )
    now = utcnow()
    registered = time.monotonic()
    await _run(
        register.update_one(
            {"_id": rid},
            {
                "$setOnInsert": {
                    **target.model_dump(),
                    "kind": target.kind,
                    "requested_at": now,
                    "actor": actor,
                    "steps": [],
                },
                "$set": {"state": "running", "attempt_at": now},
            },
            upsert=True,
        )
    )
    run = _Erasure(db, target, on_step)
    for p, u, s in (job or {}).get("sessions", ()):
        run.sessions.add(SessionKey(project_id=p, user_id=u, session_id=s))
    await run.sweep()
    await run.reload_caches()
    if on_sessions is not None and run.sessions:
        await on_sessions(sorted(run.sessions, key=lambda k: k.kafka_key()))
    await run.checkpoint("window-states")
    await relied_answers_expired(registered)
    await run.sweep()  # what a writer that had checked just before step 0 may have added
    done: datetime = utcnow()
    await _run(
        register.update_one(
            {"_id": rid},
            {"$set": {"state": "done", "done_at": done, "removed": run.removed}},
        )
    )
    total = sum(run.removed.values())
    return ErasureResult(
        kind=target.kind,
        project_id=target.project_id,
        user_id=target.user_id,
        session_id=target.session_id,
        erased=True,
        removed=run.removed,
        memories_pruned=run.pruned,
        memories_reverted=run.reverted,
        message=f"erased {target.describe()}: {total} document(s) removed or changed",
    )


async def resume_erasures(
    db: AsyncDatabase[Document], *, actor: str, on_sessions: SessionsHook | None = None
) -> list[ErasureResult]:
    """Complete every erasure left ``running`` (by a crash)."""
    jobs = await _run(db[ERASURES].find({"state": "running"}).to_list())
    out = []
    for job in jobs:
        target = Target(
            project_id=job["project_id"],
            user_id=job.get("user_id"),
            session_id=job.get("session_id"),
        )
        out.append(await erase(db, target, actor=actor, on_sessions=on_sessions))
    return out
