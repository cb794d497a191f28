"""The whole pipeline as real processes, for end-to-end fault tests and benchmarks.

:class:`Pipeline` runs every stage as ``python -m mongomem.cli run <stage>``
(through :class:`mongomem.local.supervisor.StageProcess`, the class ``make run``
uses) against its own Kafka broker and its own file-backed MongoDB-compatible
server, so a test may SIGKILL stages and restart the servers themselves. The
LLM is the rule-based stand-in (NOT a model) served over HTTP by
:class:`mongomem.testing.FakeOpenAIServer`; embeddings are the hashing stand-in.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import MEMORIES, SNAPSHOTS, TURNS, Document
from mongomem.local.infra import free_port
from mongomem.local.llm_stand_in import STAND_IN_MODEL, StandInResponder
from mongomem.local.servers import LocalKafka, LocalMongo
from mongomem.local.supervisor import StageProcess, stage_env
from mongomem.ltm.kinds import normalize_key
from mongomem.models import SessionKey
from mongomem.operations.status import consumer_group, group_lag
from mongomem.settings import (
    EmbeddingSettings,
    KafkaSettings,
    MongoSettings,
    Settings,
    load_settings,
)
from mongomem.stm.lineage import snapshot_holding
from mongomem.stm.turns import NOT_AN_EVENT
from mongomem.testing.server import FakeOpenAIServer

__all__ = [
    "STAGES",
    "TYPES",
    "Pipeline",
    "client",
    "local_servers",
    "memory_invariants",
    "snapshot_invariants",
    "stand_in_llm",
    "turns_not_in_a_snapshot",
    "wait_until",
]

STAGES = ("watcher", "windowing", "extractor", "reconciler")
TYPES = ("semantic", "episodic", "procedural", "taxonomic")


@contextmanager
def local_servers(root: Path) -> Iterator[tuple[LocalKafka, LocalMongo]]:
    """A broker and a file-backed MongoDB-compatible server this test may restart."""
    cache = load_settings().infra.state_dir.resolve() / "cache"
    kafka = LocalKafka(port=free_port(), state_dir=root / "kafka", cache_dir=cache)
    mongo = LocalMongo(port=free_port(), state_dir=root / "mongo", cache_dir=cache, persistent=True)
    for server in (kafka, mongo):
        server.state_dir.mkdir(parents=True, exist_ok=True)
    kafka.start()
    try:
        mongo.start()
        try:
            yield kafka, mongo
        finally:
            mongo.stop()
    finally:
        kafka.stop()


@dataclass
class Pipeline:
    root: Path
    kafka: LocalKafka
    mongo: LocalMongo
    llm: FakeOpenAIServer
    prefix: str = "e2e"
    database: str = "e2e"
    processes: dict[str, StageProcess] = field(default_factory=dict)
    kills: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def settings(self) -> Settings:
        return load_settings(
            mongodb=MongoSettings(uri=self.mongo.uri, database=self.database),
            kafka=KafkaSettings(
                bootstrap=self.kafka.bootstrap, topic_prefix=self.prefix, partitions=3
            ),
            embedding=EmbeddingSettings(provider="stand-in"),
        )

    def env(self) -> dict[str, str]:
        return stage_env(
            os.environ,
            {
                "MONGOMEM_MONGODB_URI": self.mongo.uri,
                "MONGOMEM_MONGODB_DATABASE": self.database,
                "MONGOMEM_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
                "MONGOMEM_KAFKA_TOPIC_PREFIX": self.prefix,
                "MONGOMEM_KAFKA_PARTITIONS": "3",
                "MONGOMEM_WINDOW_MAX_MESSAGES": "5",
                "MONGOMEM_WINDOW_IDLE_TIMEOUT_S": "1.5",
                "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
                "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.5",
                "MONGOMEM_STM_WATCHER_WATERMARK_LATENESS_S": "0.5",
                "MONGOMEM_LLM_BASE_URL": self.llm.base_url,
                "MONGOMEM_LLM_API_KEY": "stand-in",
                "MONGOMEM_LLM_TIMEOUT_S": "10",
                "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
                "MONGOMEM_EXTRACTION_BACKOFF_BASE_S": "0.1",
                "MONGOMEM_EXTRACTION_BACKOFF_MAX_S": "1",
                "MONGOMEM_ENABLED_EXTRACTIONS": ",".join(TYPES),
            },
        )

    def start(self, stage: str, *extra: str, name: str | None = None) -> StageProcess:
        name = name or stage
        process = StageProcess(
            name=name,
            stage=stage,
            args=extra,
            state_dir=self.root / "stages",
            cache_dir=self.root,
            env=self.env(),
            settle_s=0.2,
        )
        process.state_dir.mkdir(parents=True, exist_ok=True)
        process.start(timeout_s=60)
        self.processes[name] = process
        return process

    def start_all(self) -> None:
        for stage in STAGES:
            self.start(stage)

    def kill(self, name: str) -> None:
        self.processes[name].kill()
        self.kills[name] += 1

    def restart(self, name: str) -> None:
        process = self.processes[name]
        process.start(timeout_s=60)

    def revive_exited(self) -> list[str]:
        """Restart stages that exited on their own (what an orchestrator does)."""
        revived = []
        for name, process in self.processes.items():
            if not process.alive():
                process._cleanup()
                process.start(timeout_s=60)
                revived.append(name)
        return revived

    async def replay_windowing(self) -> None:
        """``mongomem replay windowing --from-offset 0`` in a new group, as an operator runs
        it (a process of its own); returns once it said it caught up."""
        command = [sys.executable, "-m", "mongomem.cli", "replay", "windowing"]
        command += ["--from-offset", "0", "--group-suffix=-replay"]
        replay = await asyncio.to_thread(
            subprocess.run, command, env=self.env(), capture_output=True, timeout=240, check=False
        )
        if replay.returncode != 0 or b"caught up" not in replay.stdout:
            raise AssertionError(f"the replay failed: {replay.stderr.decode()[-3000:]}")

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.stop(timeout_s=15)

    def logs(self) -> str:
        parts = []
        for process in self.processes.values():
            if process.log_file.exists():
                parts.append(f"--- {process.name}\n{process.log_file.read_text()[-3000:]}")
        return "\n".join(parts)

    async def diagnostics(self) -> str:
        """What a failing test prints: stage logs, lag per group, stored counts per user."""
        lines = [self.logs()]
        s = self.settings.kafka
        for group, topic in self.groups():
            try:
                lag = await group_lag(s, group, topic)
                lines.append(f"{group}: committed {lag.committed} / end {lag.end}")
            except Exception as exc:
                lines.append(f"{group}: {exc!r}")
        async with client(self) as mongo:
            db = mongo[self.database]
            covered = await _covered_seqs(db)
            for coll in (TURNS, SNAPSHOTS, MEMORIES):
                by_user: dict[str, int] = defaultdict(int)
                fields = {"user_id": 1, "scope": 1, "project_id": 1, "session_id": 1, "seq": 1}
                async for doc in db[coll].find({}, fields):
                    user = doc.get("user_id") or (doc.get("scope") or {}).get("user_id")
                    held = coll != TURNS or doc.get("seq") in covered[_session_of(doc)]
                    by_user[f"{user}{'' if held else '*'}"] += 1
                lines.append(f"{coll}: {dict(by_user)}  (* = not in a snapshot)")
        return "\n".join(lines)

    def groups(self) -> list[tuple[str, str]]:
        s = self.settings.kafka
        return [
            (consumer_group(s, "windowing"), s.topic("turns")),
            *[(consumer_group(s, f"extractor.{t}"), s.topic("snapshots")) for t in TYPES],
            (consumer_group(s, "reconciler"), s.topic("candidates")),
        ]

    async def lag(self) -> int:
        total = 0
        for group, topic in self.groups():
            total += (await group_lag(self.settings.kafka, group, topic)).lag
        return total


async def wait_until(predicate: Any, timeout_s: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last is True:
            return
        await asyncio.sleep(every)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


def _session_of(doc: Document) -> tuple[str, str, str]:
    return (doc.get("project_id", ""), doc.get("user_id", ""), doc.get("session_id", ""))


async def _covered_seqs(db: Any) -> dict[tuple[str, str, str], set[int]]:
    """Per session, the seqs its snapshots hold."""
    covered: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    async for snap in db[SNAPSHOTS].find({}, {"turns": 0}):
        covered[_session_of(snap)].update(range(snap["first_seq"], snap["last_seq"] + 1))
    return covered


async def turns_not_in_a_snapshot(db: Any) -> int:
    """How many turns (session ends aside) no snapshot holds yet."""
    covered = await _covered_seqs(db)
    fields = {"project_id": 1, "user_id": 1, "session_id": 1, "seq": 1}
    missing = 0
    async for doc in db[TURNS].find(NOT_AN_EVENT, fields):
        missing += doc["seq"] not in covered[_session_of(doc)]
    return missing


async def snapshot_invariants(db: Any) -> dict[str, int]:
    """Every turn in exactly one snapshot; each session's snapshots contiguous and disjoint.

    Returns {session: number of snapshots}. Raises AssertionError otherwise.
    """
    turns: dict[tuple[str, str, str], list[Document]] = defaultdict(list)
    async for doc in db[TURNS].find({}):
        turns[(doc["project_id"], doc["user_id"], doc["session_id"])].append(doc)
    snaps: dict[tuple[str, str, str], list[Document]] = defaultdict(list)
    async for doc in db[SNAPSHOTS].find({}):
        snaps[(doc["project_id"], doc["user_id"], doc["session_id"])].append(doc)
    counts: dict[str, int] = {}
    for session, docs in turns.items():
        seqs = sorted(d["seq"] for d in docs)
        assert seqs == list(range(1, len(seqs) + 1)), f"{session}: seqs {seqs}"
        runs = sorted((s["first_seq"], s["last_seq"]) for s in snaps[session])
        covered = [seq for first, last in runs for seq in range(first, last + 1)]
        assert covered == seqs, f"{session}: snapshots {runs} do not tile turns 1..{len(seqs)}"
        key = SessionKey(project_id=session[0], user_id=session[1], session_id=session[2])
        for snap in snaps[session]:
            for seq in {
                snap["first_seq"],
                (snap["first_seq"] + snap["last_seq"]) // 2,
                snap["last_seq"],
            }:
                holder = await snapshot_holding(db, key, seq)
                assert holder == snap["_id"], f"{session} turn {seq}: lineage"
        counts["/".join(session)] = len(runs)
    return counts


async def memory_invariants(db: Any) -> list[Document]:
    """At most one current version per (type, scope, key); versions 1..n per memory."""
    docs = [d async for d in db[MEMORIES].find({}, {"embedding": 0})]
    current: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    versions: dict[str, list[int]] = defaultdict(list)
    for doc in docs:
        versions[doc["memory_id"]].append(doc["version"])
        if doc["status"] == "current":
            scope = doc["scope"]
            key = (
                doc["memory_type"],
                scope["project_id"],
                scope.get("user_id"),
                normalize_key(doc["key"]),
            )
            current[key].append(doc["memory_id"])
    dupes = {k: v for k, v in current.items() if len(v) > 1}
    assert not dupes, f"duplicate current memories: {dupes}"
    for memory_id, vs in versions.items():
        assert sorted(vs) == list(range(1, len(vs) + 1)), f"{memory_id}: versions {vs}"
    return docs


def stand_in_llm() -> FakeOpenAIServer:
    return FakeOpenAIServer(StandInResponder(), model=STAND_IN_MODEL)


def client(pipeline: Pipeline) -> AsyncMongoClient[Document]:
    return AsyncMongoClient(pipeline.mongo.uri, tz_aware=True)
