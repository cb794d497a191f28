"""``mongomem eval``: score memory against a full-context baseline (SPEC K5).

The harness expects a **running pipeline** (``mongomem up``, or stages
deployed elsewhere) reachable with the same ``MONGOMEM_*`` settings: it
writes turns through the SDK and waits for the stages; it starts none.

Per conversation, under its own user in a project of its own per run
(``eval-<run id>``):

1. every session is recorded with the turns' own times
   (``record_turn(..., at=)``), ended (``end_session()``), and the harness
   waits until extraction caught up (``wait_until_processed(all_turns=True)``);
2. each question is answered twice with the configured LLM and the same
   prompt (``prompts/answer_v1.txt``): from ``build_context`` (memory) and
   from the whole conversation (full-context baseline);
3. both answers are graded by the same LLM with the judge prompt
   (``prompts/judge_v1.txt``): J is the share graded CORRECT;
4. the context's evidence recall (SPEC M3, :mod:`mongomem.evaluation.context_recall`):
   whether a memory of the context cites a gold turn through its evidence
   lineage (``context_evidence`` on each question with gold evidence).

Measured per question: the ``build_context`` time (search), the answer
call's prompt tokens (context tokens per query: the prompt is the fixed
instruction plus the context) and completion tokens (answer tokens), and the
judge's tokens. Every eval call is also accounted in ``llm_usage`` as a query
(purposes ``eval-answer``, ``eval-answer-full``, ``eval-judge``). Extraction
tokens and calls per conversation are read from ``llm_usage`` (the
conversation's snapshots).

**Resumable**: a local JSONL checkpoint (``checkpoint.jsonl`` in the output
folder) gets one line per ingested session, per caught-up conversation
and per answered question, flushed as written. A rerun with the same
``--out`` reuses the run id, skips what the checkpoint holds, and within a
session cut short records only the turns after the session's last stored
seq (a crash between a session's end and its checkpoint line records the
end once more: an end event with no turns after the first). The report
(``report.md`` and ``report.json``) is written from the
checkpoint at the end of every run.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, Field

from mongomem.adapters.llm import LLM, ChatMessage
from mongomem.adapters.mongo import SNAPSHOTS, Document, connect
from mongomem.errors import ConfigError, NotFound
from mongomem.evaluation.context_recall import GoldTurns, Snapshots, context_found, gold_positions
from mongomem.evaluation.datasets import Benchmark, EvalConversation, EvalQuestion
from mongomem.evaluation.report import write_report
from mongomem.evaluation.retrieval import turn_metadata
from mongomem.models import utcnow
from mongomem.operations.usage import LLM_USAGE, MongoUsageRecorder, UsageKey, UsageMeter
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, MemoryContext, MemoryRequestContext
from mongomem.settings import Settings

__all__ = [
    "ANSWER_PROMPT_VERSION",
    "JUDGE_PROMPT_VERSION",
    "EvalAnswer",
    "EvalOptions",
    "EvalVerdict",
    "answer_messages",
    "judge_messages",
    "run_eval",
]

ANSWER_PROMPT_VERSION = "answer_v1"
JUDGE_PROMPT_VERSION = "judge_v1"
CHECKPOINT = "checkpoint.jsonl"


def _prompt(version: str) -> str:
    return resources.files("mongomem.evaluation").joinpath(f"prompts/{version}.txt").read_text()


class EvalAnswer(BaseModel):
    answer: str = Field(max_length=2000)


class EvalVerdict(BaseModel):
    reason: str = Field(default="", max_length=2000)
    label: Literal["CORRECT", "WRONG"]


def answer_messages(question: EvalQuestion, material: str, heading: str) -> list[ChatMessage]:
    """The answer prompt: instruction, then ``Question:``, then the material."""
    asked = f" (asked on {question.question_date})" if question.question_date else ""
    user = f"Question{asked}: {question.question}\n\n{heading}:\n{material}"
    return [
        {"role": "system", "content": _prompt(ANSWER_PROMPT_VERSION)},
        {"role": "user", "content": user},
    ]


def judge_messages(question: EvalQuestion, generated: str) -> list[ChatMessage]:
    """The judge prompt: instruction, then the question, gold and generated answers."""
    user = (
        f"Question: {question.question}\nGold answer: {question.answer}\n"
        f"Generated answer: {generated}"
    )
    return [
        {"role": "system", "content": _prompt(JUDGE_PROMPT_VERSION)},
        {"role": "user", "content": user},
    ]


@dataclass(frozen=True)
class EvalOptions:
    out: Path
    data: Path
    command: Sequence[str]
    limit_per_type: int = 5
    max_chars: int = 4000
    wait_timeout_s: float = 600.0
    console: TextIO = field(default=sys.stderr)


class Checkpoint:
    """The JSONL file of what is done; each line is flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        raws = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        for number, raw in enumerate(raws, 1):
            if not raw.strip():
                continue
            try:
                self.lines.append(json.loads(raw))
            except ValueError:
                if number == len(raws):
                    break  # the last line cut short by a crash: that step is redone
                raise ConfigError(f"{path} line {number} is not JSON") from None

    def header(self) -> dict[str, Any] | None:
        return next((x for x in self.lines if x.get("kind") == "run"), None)

    def done(self, kind: str) -> set[str]:
        return {str(x["id"]) for x in self.lines if x.get("kind") == kind}

    def questions(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x.get("kind") == "question"]

    def conversations(self) -> list[dict[str, Any]]:
        return [x for x in self.lines if x.get("kind") == "conversation"]

    def add(self, line: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()
        self.lines.append(line)


class ProgressBar:
    """A one-line text bar on the console (``\\r``-redrawn)."""

    def __init__(self, total: int, console: TextIO, done: int = 0) -> None:
        self.total, self.done, self.console = max(total, 1), done, console

    def show(self, what: str) -> None:
        width = 30
        filled = width * self.done // self.total
        bar = "#" * filled + "." * (width - filled)
        line = f"\r[{bar}] {self.done}/{self.total} questions  {what[:40]:<40}"
        self.console.write(line)
        self.console.flush()

    def step(self, what: str) -> None:
        self.done += 1
        self.show(what)

    def close(self) -> None:
        self.console.write("\n")
        self.console.flush()


def _digest(path: Path) -> str:
    """The data's SHA-256: of the file, or of a folder's ``*.json`` files (names and bytes)."""
    if not path.is_dir():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256()
    for f in sorted(path.glob("*.json")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


async def _extraction_usage(settings: Settings, project: str, user: str) -> dict[str, Any]:
    """Calls and tokens of the extraction of this user's snapshots, from ``llm_usage``."""
    client = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        ids = [
            d["_id"]
            async for d in db[SNAPSHOTS].find({"project_id": project, "user_id": user}, {"_id": 1})
        ]
        totals: dict[str, Any] = {
            "snapshots": len(ids),
            "calls": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
        }
        models: set[str] = set()
        query: Document = {"kind": "call", "purpose": "extract", "snapshot_id": {"$in": ids}}
        async for doc in db[LLM_USAGE].find(query):
            for name in ("calls", "prompt_tokens", "completion_tokens"):
                totals[name] += int(doc.get(name, 0))
            if doc.get("model"):
                models.add(str(doc["model"]))
        totals["models"] = sorted(models)  # the models that actually answered the extraction
        return totals
    finally:
        await client.close()


async def _snapshots(
    settings: Settings, project: str, user: str
) -> dict[str, tuple[str, int, int]]:
    """This user's snapshots: id -> (session, first seq, last seq)."""
    client = connect(settings.mongodb)
    try:
        db = client[settings.mongodb.database]
        query: Document = {"project_id": project, "user_id": user}
        fields = {"session_id": 1, "first_seq": 1, "last_seq": 1}
        return {
            str(d["_id"]): (str(d["session_id"]), int(d["first_seq"]), int(d["last_seq"]))
            async for d in db[SNAPSHOTS].find(query, fields)
        }
    finally:
        await client.close()


async def _context_evidence(
    chat: AsyncBoundMemory,
    context: MemoryContext,
    question: EvalQuestion,
    lineage: tuple[GoldTurns, Snapshots],
) -> dict[str, bool] | None:
    """Whether the context's memories cite the question's gold turns (see
    :func:`~mongomem.evaluation.context_recall.context_found`)."""
    where, snapshots = lineage
    if not any(g in where for g in question.evidence):
        return None
    ids = dict.fromkeys(i.memory_id for i in context.items if i.memory_type != "turn")
    evidence = [e for memory_id in ids for v in await chat.history(memory_id) for e in v.evidence]
    return context_found(question, evidence, where, snapshots)


async def _stored_turns(chat: AsyncBoundMemory) -> int:
    """How many of the session's turns are stored already: its last turn's seq.

    0 for a session in which no turn was recorded yet — the first run, or a
    crash before its first turn (:class:`~mongomem.errors.NotFound` from the
    processing status, which never answers "done" for such a session).
    """
    try:
        return (await chat.processing_status()).last_turn_seq
    except NotFound:
        return 0


async def _ingest(
    memory: AsyncMemory, conv: EvalConversation, user: str, cp: Checkpoint, timeout_s: float
) -> None:
    """Record and end each session not yet in the checkpoint, then wait for all of them.

    Only sessions with turns are recorded and waited on: a session with none
    (the readers leave those out) would have nothing stored to wait for.
    """
    sessions = [s for s in conv.sessions if s.turns]
    ended = cp.done("session")
    for session in sessions:
        sid = f"{conv.conversation_id}/{session.name}"
        if sid in ended:
            continue
        chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session.name))
        stored = await _stored_turns(chat)  # resume a session cut short
        for turn in session.turns[stored:]:
            meta = turn_metadata(turn.dataset_id, turn.speaker)  # the dataset's turn id (M3)
            await chat.record_turn(turn.role, turn.content, meta, at=turn.at, speaker=turn.speaker)
        await chat.end_session()
        cp.add({"kind": "session", "id": sid, "turns": len(session.turns)})
    for session in sessions:
        chat = memory.bind(MemoryRequestContext(user_id=user, session_id=session.name))
        await chat.wait_until_processed(timeout=timeout_s, all_turns=True)


async def _ask(
    llm: LLM, messages: list[ChatMessage], schema: type[Any], name: str, meter: UsageMeter
) -> Any:
    result = await llm.structured(messages, schema, schema_name=name, meter=meter)
    meter.finished()
    return result


async def _question(
    llm: LLM,
    memory: AsyncMemory,
    recorder: MongoUsageRecorder,
    conv: EvalConversation,
    question: EvalQuestion,
    user: str,
    project: str,
    options: EvalOptions,
    lineage: tuple[GoldTurns, Snapshots] | None = None,
) -> dict[str, Any]:
    chat = memory.bind(MemoryRequestContext(user_id=user))
    started = time.perf_counter()
    context = await chat.build_context(
        question.question, limit_per_type=options.limit_per_type, max_chars=options.max_chars
    )
    search_s = time.perf_counter() - started
    line: dict[str, Any] = {
        "kind": "question",
        "id": question.question_id,
        "conversation": conv.conversation_id,
        "category": question.category,
        "question": question.question,
        "gold": question.answer,
        "search_s": search_s,
        "context_items": len(context.items),
    }
    if lineage is not None:
        found = await _context_evidence(chat, context, question, lineage)
        if found is not None:
            line["context_evidence"] = found
    arms = {
        "memory": (context.text or "(no memories found)", "Memories", "eval-answer"),
        "full": (conv.transcript(), "Conversation", "eval-answer-full"),
    }
    for arm, (material, heading, purpose) in arms.items():
        meter = UsageMeter(recorder, UsageKey.query(question.question_id, purpose, project))
        answer = await _ask(
            llm, answer_messages(question, material, heading), EvalAnswer, "eval_answer", meter
        )
        jmeter = UsageMeter(
            recorder, UsageKey.query(f"{question.question_id}/{arm}", "eval-judge", project)
        )
        line[arm] = {
            "answer": answer.value.answer,
            "context_tokens": answer.usage.prompt_tokens,
            "answer_tokens": answer.usage.completion_tokens,
            "model": answer.model,
        }
        if not answer.value.answer.strip():  # nothing to grade: wrong, the judge is not asked
            line[arm] |= {
                "label": "WRONG",
                "judge_reason": "empty answer (not sent to the judge)",
                "judge_tokens": 0,
                "calls": meter.calls,
                "judge_model": "-",
            }
            continue
        verdict = await _ask(
            llm, judge_messages(question, answer.value.answer), EvalVerdict, "eval_judge", jmeter
        )
        line[arm] |= {
            "label": verdict.value.label,
            "judge_reason": verdict.value.reason,
            "judge_tokens": verdict.usage.total_tokens,
            "calls": meter.calls + jmeter.calls,
            "judge_model": verdict.model,
        }
    return line


async def run_eval(
    benchmark: Benchmark,
    conversations: list[EvalConversation],
    settings: Settings,
    llm: LLM,
    options: EvalOptions,
) -> dict[str, Any]:
    """Ingest, wait, answer, grade; resume from the checkpoint; write the report.

    Returns the report's JSON. Raises :class:`~mongomem.errors.ConfigError`
    when ``options.out`` holds the checkpoint of another benchmark or file.
    """
    cp = Checkpoint(options.out / CHECKPOINT)
    digest = _digest(options.data)
    header = cp.header()
    if header is None:
        header = {
            "kind": "run",
            "id": uuid.uuid4().hex[:12],
            "benchmark": benchmark,
            "data": options.data.name,
            "data_sha256": digest,
            "started_at": utcnow().isoformat(),
            "command": shlex.join(options.command),
            "answer_prompt": ANSWER_PROMPT_VERSION,
            "judge_prompt": JUDGE_PROMPT_VERSION,
        }
        cp.add(header)
    elif header.get("benchmark") != benchmark or header.get("data_sha256") != digest:
        raise ConfigError(
            f"{options.out} holds the checkpoint of another run ({header.get('benchmark')} "
            f"on {header.get('data')}); pass another --out to start a new one"
        )
    project = f"eval-{header['id']}"
    answered = cp.done("question")
    total = sum(len(c.questions) for c in conversations)
    bar = ProgressBar(total, options.console, done=len(answered))
    usage_client = connect(settings.mongodb)
    recorder = MongoUsageRecorder(usage_client[settings.mongodb.database][LLM_USAGE])
    memory = AsyncMemory(project_id=project, settings=settings)
    try:
        caught_up = cp.done("conversation")
        for index, conv in enumerate(conversations):
            user = f"conv-{index}-{conv.conversation_id}"
            if conv.conversation_id not in caught_up:
                bar.show(f"ingesting {conv.conversation_id}")
                began = time.perf_counter()
                await _ingest(memory, conv, user, cp, options.wait_timeout_s)
                usage = await _extraction_usage(settings, project, user)
                cp.add(
                    {
                        "kind": "conversation",
                        "id": conv.conversation_id,
                        "user": user,
                        "sessions": len(conv.sessions),
                        "turns": sum(len(s.turns) for s in conv.sessions),
                        "ingest_s": time.perf_counter() - began,
                        "extraction": usage,
                    }
                )
            lineage = (gold_positions(conv), await _snapshots(settings, project, user))
            for question in conv.questions:
                if question.question_id in answered:
                    continue
                line = await _question(
                    llm, memory, recorder, conv, question, user, project, options, lineage
                )
                cp.add(line)
                bar.step(question.question_id)
    finally:
        bar.close()
        await memory.close()
        await usage_client.close()
    return write_report(
        cp.header() or header,
        cp.conversations(),
        cp.questions(),
        options.out,
        settings=settings,
        llm_name=llm.name,
        finished_at=datetime.now().astimezone(),
    )
