"""Readers for the public LoCoMo and LongMemEval JSON files (the data is not shipped).

Both read the whole file and check it before anything is ingested: a file
that does not fit raises :class:`~mongomem.errors.InputError` naming the item
and the field, and nothing is stored.

**LoCoMo** (``locomo10.json`` of snap-research/locomo): a list of samples.
Fields read per sample: ``sample_id``; ``conversation.speaker_a`` and
``speaker_b`` (a conversation between two people: every turn is recorded with
role ``user`` and its ``speaker``'s name, SPEC L3 — neither is an assistant);
``conversation.session_<N>`` (a list of ``{speaker, dia_id, text}``; ``dia_id``
is kept only to name the turn) and ``conversation.session_<N>_date_time``
(``"1:56 pm on 8 May, 2023"``, read as UTC); ``qa`` items' ``question``,
``answer``, ``category`` and ``evidence``. Questions of category 5
(adversarial: they carry ``adversarial_answer`` and no ``answer``) are left
out, as in the Mem0 paper's protocol behind the published J scores. Images
(``img_url``, ``blip_caption``) and the summaries are not read.

**LongMemEval** (``longmemeval_s.json`` / ``_m`` / ``_oracle`` of
xiaowu0162/LongMemEval): a list of items, each its own conversation with one
question. Fields read: ``question_id``, ``question_type`` (the category;
an id ending in ``_abs`` adds ``" (abstention)"``), ``question``, ``answer``,
``question_date``, ``haystack_sessions`` (lists of ``{role, content}``),
``haystack_dates`` (``"2023/05/20 (Sat) 02:21"``, read as UTC) and, when
present, ``haystack_session_ids`` (the session names).

Turns of a session get the session's time plus one second per turn, so
their order is kept and every turn carries its session's own date.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from mongomem.errors import InputError

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "EvalConversation",
    "EvalQuestion",
    "EvalSession",
    "EvalTurn",
    "read_dataset",
    "read_locomo",
    "read_longmemeval",
]

Benchmark = Literal["locomo", "longmemeval"]
BENCHMARKS: tuple[Benchmark, ...] = ("locomo", "longmemeval")

#: LoCoMo's adversarial category (no gold ``answer``; not scored).
LOCOMO_ADVERSARIAL = 5


@dataclass(frozen=True)
class EvalTurn:
    role: str  # "user" or "assistant"
    content: str
    at: datetime
    #: who spoke, when the file names them (LoCoMo's two speakers)
    speaker: str | None = None


@dataclass(frozen=True)
class EvalSession:
    name: str
    at: datetime
    turns: tuple[EvalTurn, ...]


@dataclass(frozen=True)
class EvalQuestion:
    question_id: str
    question: str
    answer: str
    category: str
    question_date: str | None = None
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvalConversation:
    conversation_id: str
    sessions: tuple[EvalSession, ...]
    questions: tuple[EvalQuestion, ...]

    def transcript(self) -> str:
        """The whole conversation as text, session by session with dates (full context)."""
        parts = []
        for session in self.sessions:
            parts.append(f"## {session.name} ({session.at:%Y-%m-%d %H:%M} UTC)")
            parts.extend(f"{t.speaker or t.role}: {t.content}" for t in session.turns)
        return "\n".join(parts)


def _bad(where: str, detail: str) -> InputError:
    return InputError(f"{where}: {detail}", field="data")


def _load(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}", field="data") from exc
    except ValueError as exc:
        raise InputError(f"{path} is not JSON: {exc}", field="data") from exc
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: expected a non-empty JSON list of items", field="data")
    return data


def _text(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _bad(where, f"field {name!r} missing or not text")
    text = str(value).strip()
    if not text:
        raise _bad(where, f"field {name!r} is empty")
    return text


def _locomo_time(text: str, where: str) -> datetime:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise _bad(where, f"date {text!r} is not like '1:56 pm on 8 May, 2023'")


def _longmemeval_time(text: str, where: str) -> datetime:
    plain = re.sub(r"\s*\([A-Za-z]{3}\)\s*", " ", text).strip()
    for fmt in ("%Y/%m/%d %H:%M", "%Y/%m/%d"):
        try:
            return datetime.strptime(plain, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise _bad(where, f"date {text!r} is not like '2023/05/20 (Sat) 02:21'")


def _turns(
    at: datetime, pairs: list[tuple[str, str]], speakers: list[str] | None = None
) -> tuple[EvalTurn, ...]:
    return tuple(
        EvalTurn(
            role=role,
            content=content,
            at=at + timedelta(seconds=i),
            speaker=speakers[i] if speakers else None,
        )
        for i, (role, content) in enumerate(pairs)
    )


_SESSION = re.compile(r"^session_(\d+)$")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def read_locomo(path: Path) -> list[EvalConversation]:
    """The conversations of a LoCoMo file (see the module docstring for the fields)."""
    conversations = []
    for index, sample in enumerate(_load(path)):
        where = f"{path.name} item {index}"
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise _bad(where, "expected an object with a 'conversation' object")
        cid = _text(sample, "sample_id", where) if "sample_id" in sample else f"conv-{index}"
        conv: dict[str, Any] = sample["conversation"]
        numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)))
        if not numbers:
            raise _bad(where, "conversation has no session_<N> lists")
        sessions = []
        for n in numbers:
            name, swhere = f"session_{n}", f"{where} session_{n}"
            turns = conv[name]
            if not isinstance(turns, list):
                raise _bad(swhere, "expected a list of turns")
            date = conv.get(f"{name}_date_time")
            if not isinstance(date, str):
                raise _bad(swhere, f"no {name}_date_time")
            at = _locomo_time(date, swhere)
            pairs, speakers = [], []
            for t, turn in enumerate(turns):
                if not isinstance(turn, dict):
                    raise _bad(f"{swhere} turn {t}", "expected an object")
                speaker = _text(turn, "speaker", f"{swhere} turn {t}")
                text = _text(turn, "text", f"{swhere} turn {t}")
                if _CONTROL.search(speaker) or len(speaker) > 128:
                    raise _bad(f"{swhere} turn {t}", "speaker is not a name (1-128 characters)")
                pairs.append(("user", text))
                speakers.append(speaker)
            if pairs:
                sessions.append(EvalSession(name=name, at=at, turns=_turns(at, pairs, speakers)))
        qa = sample.get("qa")
        if not isinstance(qa, list):
            raise _bad(where, "no 'qa' list")
        questions = []
        for q, item in enumerate(qa):
            qwhere = f"{where} qa {q}"
            if not isinstance(item, dict):
                raise _bad(qwhere, "expected an object")
            category = item.get("category")
            if isinstance(category, bool) or not isinstance(category, int):
                raise _bad(qwhere, "field 'category' missing or not an integer")
            if category == LOCOMO_ADVERSARIAL:
                continue
            evidence = item.get("evidence") or []
            questions.append(
                EvalQuestion(
                    question_id=f"{cid}/q{q}",
                    question=_text(item, "question", qwhere),
                    answer=_text(item, "answer", qwhere),
                    category=str(category),
                    evidence=tuple(str(e) for e in evidence) if isinstance(evidence, list) else (),
                )
            )
        conversations.append(
            EvalConversation(
                conversation_id=cid, sessions=tuple(sessions), questions=tuple(questions)
            )
        )
    return conversations


def read_longmemeval(path: Path) -> list[EvalConversation]:
    """The items of a LongMemEval file, one conversation each (see the module docstring)."""
    conversations = []
    for index, item in enumerate(_load(path)):
        where = f"{path.name} item {index}"
        if not isinstance(item, dict):
            raise _bad(where, "expected an object")
        qid = _text(item, "question_id", where)
        where = f"{path.name} item {index} ({qid})"
        haystack, dates = item.get("haystack_sessions"), item.get("haystack_dates")
        if not isinstance(haystack, list) or not isinstance(dates, list):
            raise _bad(where, "haystack_sessions and haystack_dates must be lists")
        if len(haystack) != len(dates):
            raise _bad(where, f"{len(haystack)} haystack_sessions but {len(dates)} haystack_dates")
        ids = item.get("haystack_session_ids")
        if not isinstance(ids, list) or len(ids) != len(haystack):
            ids = [f"session_{i + 1}" for i in range(len(haystack))]
        sessions = []
        for s, (turns, date) in enumerate(zip(haystack, dates, strict=True)):
            swhere = f"{where} session {s}"
            if not isinstance(turns, list) or not isinstance(date, str):
                raise _bad(swhere, "expected a list of turns and a date string")
            at = _longmemeval_time(date, swhere)
            pairs = []
            for t, turn in enumerate(turns):
                twhere = f"{swhere} turn {t}"
                if not isinstance(turn, dict):
                    raise _bad(twhere, "expected an object")
                role = _text(turn, "role", twhere)
                if role not in ("user", "assistant"):
                    raise _bad(twhere, f"role {role!r} is not user or assistant")
                pairs.append((role, _text(turn, "content", twhere)))
            if pairs:
                name = f"{s + 1:03d}-{ids[s]}"[:120]
                sessions.append(EvalSession(name=name, at=at, turns=_turns(at, pairs)))
        sessions.sort(key=lambda x: x.at)  # historical import: sessions in time order
        category = _text(item, "question_type", where)
        if qid.endswith("_abs"):
            category += " (abstention)"
        date = item.get("question_date")
        question = EvalQuestion(
            question_id=qid,
            question=_text(item, "question", where),
            answer=_text(item, "answer", where),
            category=category,
            question_date=date if isinstance(date, str) else None,
        )
        conversations.append(
            EvalConversation(conversation_id=qid, sessions=tuple(sessions), questions=(question,))
        )
    return conversations


def read_dataset(benchmark: Benchmark, path: Path) -> list[EvalConversation]:
    """Read ``path`` as ``benchmark``'s public format."""
    if benchmark == "locomo":
        return read_locomo(path)
    return read_longmemeval(path)
