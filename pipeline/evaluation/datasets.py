"""Readers for the public LoCoMo and LongMemEval JSON files (the data is not shipped).

Both read the whole file and check it before anything is ingested: a file
that does not fit raises :class:`~mongomem.errors.InputError` naming the item
and the field, and nothing is stored.

**LoCoMo** (snap-research/locomo), in either layout: the list file
(``locomo10.json``: ``[{sample_id, conversation: {...}, qa: [...]}]``), or
per-conversation objects (the conversation's keys at the top level with
``qa`` beside them) as one file or a folder of ``*.json`` files (read in name
order). Fields read per sample: ``sample_id``; ``session_<N>`` (a list of ``{speaker,
dia_id, text, blip_caption?}``: ``dia_id`` is the turn's dataset id, kept on
the turn for evidence recall; an image's ``blip_caption`` is read as part of
the turn's text, ``[shares an image: …]``) and ``session_<N>_date_time``
(``"1:56 pm on 8 May, 2023"``, read as UTC); ``qa`` items' ``question``,
``answer``, ``category`` and ``evidence`` (gold ``dia_id`` s). Questions of
category 5 (adversarial: they carry ``adversarial_answer`` and no ``answer``)
are left out, as in the Mem0 paper's protocol behind the published J scores.
The summaries are not read. LoCoMo is a conversation between two people, neither an
assistant: every turn is recorded as role ``user`` with its ``speaker``'s name (SPEC L3),
its text prefixed with that name (so the raw transcript and turn search read who said it).

**LongMemEval** (``longmemeval_s.json`` / ``_m`` / ``_oracle`` of
xiaowu0162/LongMemEval): a list of items, each its own conversation with one
question. Fields read: ``question_id``, ``question_type`` (the category;
an id ending in ``_abs`` adds ``" (abstention)"``), ``question``, ``answer``,
``question_date``, ``haystack_sessions`` (lists of ``{role, content}``),
``haystack_dates`` (``"2023/05/20 (Sat) 02:21"``, read as UTC) and, when
present, ``haystack_session_ids`` (the session names). A turn's dataset id is
``<session id>#<index>``; the gold evidence is the turns marked
``has_answer: true``, else (no turn marked) every turn of
``answer_session_ids``.

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
    role: str  # "user" or "assistant" (every LoCoMo turn: "user", with its speaker)
    content: str
    at: datetime
    #: The dataset's id of the turn (LoCoMo ``dia_id``), stored on the turn for evidence recall.
    dataset_id: str | None = None
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
            # a named speaker's text starts with the name already (LoCoMo)
            parts.extend(
                t.content if t.speaker else f"{t.role}: {t.content}" for t in session.turns
            )
        return "\n".join(parts)


def _bad(where: str, detail: str) -> InputError:
    return InputError(f"{where}: {detail}", field="data")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}", field="data") from exc
    except ValueError as exc:
        raise InputError(f"{path} is not JSON: {exc}", field="data") from exc


def _load(path: Path, *, objects: bool = False) -> list[Any]:
    """The items of ``path``: a JSON list; with ``objects`` also one object, or a folder of
    files each holding either (in file-name order)."""
    if objects and path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise InputError(f"{path}: a folder with no *.json files", field="data")
        return [item for f in files for item in _load(f, objects=True)]
    data = _read_json(path)
    if objects and isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        kind = "JSON list of items or an object" if objects else "JSON list of items"
        raise InputError(f"{path}: expected a non-empty {kind}", field="data")
    return data


def _turns_of(at: datetime, turns: list[EvalTurn]) -> tuple[EvalTurn, ...]:
    """``turns`` at the session's time plus one second each."""
    return tuple(
        EvalTurn(
            role=t.role,
            content=t.content,
            at=at + timedelta(seconds=i),
            dataset_id=t.dataset_id,
            speaker=t.speaker,
        )
        for i, t in enumerate(turns)
    )


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


_SESSION = re.compile(r"^session_(\d+)$")


def _locomo_text(turn: dict[str, Any], where: str) -> str:
    """A LoCoMo turn's text, with its image's caption (``blip_caption``) when it has one."""
    caption = turn.get("blip_caption")
    has_caption = isinstance(caption, str) and caption.strip()
    if not has_caption:
        return _text(turn, "text", where)
    said = turn.get("text")
    said = str(said).strip() if isinstance(said, str | int | float) else ""
    shown = f"[shares an image: {str(caption).strip()}]"
    return f"{said} {shown}".strip()


def read_locomo(path: Path) -> list[EvalConversation]:
    """The conversations of a LoCoMo file (see the module docstring for the fields)."""
    conversations = []
    for index, sample in enumerate(_load(path, objects=True)):
        where = f"{path.name} item {index}"
        if not isinstance(sample, dict):
            raise _bad(where, "expected an object")
        conv: dict[str, Any]
        if isinstance(sample.get("conversation"), dict):
            conv = sample["conversation"]
        elif any(_SESSION.match(k) for k in sample):  # a per-conversation object
            conv = sample
        else:
            raise _bad(where, "expected a 'conversation' object or session_<N> lists")
        cid = _text(sample, "sample_id", where) if "sample_id" in sample else f"conv-{index}"
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
            read = []
            for t, turn in enumerate(turns):
                twhere = f"{swhere} turn {t}"
                if not isinstance(turn, dict):
                    raise _bad(twhere, "expected an object")
                speaker = _text(turn, "speaker", twhere)
                text = _locomo_text(turn, twhere)
                dia = turn.get("dia_id")
                read.append(
                    EvalTurn(
                        role="user",  # two people talk: no assistant (SPEC L3)
                        content=f"{speaker}: {text}",
                        at=at,
                        dataset_id=str(dia) if isinstance(dia, str | int) else None,
                        speaker=speaker,
                    )
                )
            if read:
                sessions.append(EvalSession(name=name, at=at, turns=_turns_of(at, read)))
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
        marked: list[str] = []
        by_session: dict[str, list[str]] = {}
        for s, (turns, date) in enumerate(zip(haystack, dates, strict=True)):
            swhere = f"{where} session {s}"
            if not isinstance(turns, list) or not isinstance(date, str):
                raise _bad(swhere, "expected a list of turns and a date string")
            at = _longmemeval_time(date, swhere)
            read = []
            for t, turn in enumerate(turns):
                twhere = f"{swhere} turn {t}"
                if not isinstance(turn, dict):
                    raise _bad(twhere, "expected an object")
                role = _text(turn, "role", twhere)
                if role not in ("user", "assistant"):
                    raise _bad(twhere, f"role {role!r} is not user or assistant")
                dataset_id = f"{ids[s]}#{t}"
                by_session.setdefault(str(ids[s]), []).append(dataset_id)
                if turn.get("has_answer") is True:
                    marked.append(dataset_id)
                content = _text(turn, "content", twhere)
                read.append(EvalTurn(role=role, content=content, at=at, dataset_id=dataset_id))
            if read:
                name = f"{s + 1:03d}-{ids[s]}"[:120]
                sessions.append(EvalSession(name=name, at=at, turns=_turns_of(at, read)))
        sessions.sort(key=lambda x: x.at)  # historical import: sessions in time order
        category = _text(item, "question_type", where)
        if qid.endswith("_abs"):
            category += " (abstention)"
        date = item.get("question_date")
        answer_sessions = item.get("answer_session_ids")
        evidence = marked or [
            t
            for sid in (answer_sessions if isinstance(answer_sessions, list) else [])
            for t in by_session.get(str(sid), [])
        ]
        question = EvalQuestion(
            question_id=qid,
            question=_text(item, "question", where),
            answer=_text(item, "answer", where),
            category=category,
            question_date=date if isinstance(date, str) else None,
            evidence=tuple(evidence),
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
