"""The demo stand-in's rules: a responder that is NOT a language model.

``make run`` with no LLM configured (and ``MONGOMEM_LLM_USE_STAND_IN=true``)
serves this responder through
:class:`~mongomem.local.llm_stand_in.server.OpenAICompatibleServer` so the
end-to-end demo shows memories. It reads the conversation turns that
the extraction prompt carries as JSON lines and applies a few regular
expressions:

* semantic — "my home airport is Boston", "I live in Lisbon", "call me Ana" (in a
  conversation between named speakers, "my …" is the speaker's: "Ana's home airport");
* taxonomic — "a red-eye means an overnight flight …" (domain from
  "in airline terms" / "in airline jargon", else ``general``);
* procedural — two or more numbered steps, named after "how to …";
* episodic — one episode per conversation of at least two turns;
* the reconciler's judge (schema ``reconcile_verdict``, or ``reconcile_verdicts``
  for a batch: one verdict per question id) — the same text is REINFORCE, the
  same key with another text is UPDATE, else ADD;
* ``mongomem eval``'s answer (schema ``eval_answer``) — the line of the
  given material sharing the most words with the question — and its judge
  (schema ``eval_judge``) — CORRECT when the gold answer's words all occur
  in the generated answer. Mechanics only: no reading of meaning.

Every answer's ``model`` field, the start banner and every log line say it is
not a real model. It must never be used when an endpoint is configured; the
choice is made in :func:`mongomem.adapters.llm.make_llm`, not here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mongomem.local.llm_stand_in.chat import Answer, ChatRequest

__all__ = ["STAND_IN_BANNER", "STAND_IN_MODEL", "StandInResponder", "read_turns", "slug"]

STAND_IN_MODEL = "STAND-IN rule-based responder (NOT a real model)"
STAND_IN_BANNER = (
    "\n" + "!" * 78 + "\n"
    "!!  LLM STAND-IN: answers come from a few regular expressions, NOT a real model.\n"
    "!!  Memories extracted in this mode only demonstrate the pipeline.\n"
    "!!  Set MONGOMEM_LLM_BASE_URL and MONGOMEM_LLM_API_KEY to use a real model.\n" + "!" * 78
)

_MY_X_IS = re.compile(r"\bmy ([a-z][a-z -]{1,40}?) (?:is|are) ([^.!?\n]{1,120})", re.IGNORECASE)
_LIVE_IN = re.compile(r"\bi live in ([A-Z][\w .'-]{1,60}?)(?=[.!?,\n]|$)")
_CALL_ME = re.compile(r"\bcall me ([A-Z][\w'-]{0,40})")
_MEANS = re.compile(
    r"(?:^|[.!?]\s+|\b(?:a|an|the)\s+)[\"']?([\w-]+(?: [\w-]+)?)[\"']? means ([^.!?\n]{3,200})",
    re.IGNORECASE,
)
_DOMAIN = re.compile(r"\bin ([a-z][\w-]{1,30}) (?:terms|jargon|speak|parlance)\b", re.IGNORECASE)
_STEP = re.compile(r"^\s*(\d{1,2})[.)]\s+(.+?)\s*$", re.MULTILINE)
#: Turns that try to instruct the extractor are data, not facts: the stand-in skips them.
_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget) (?:all |any |the )?(?:previous|prior|above|earlier|your) "
    r"(?:instructions|rules|prompts?)\b|\byou are now\b",
    re.IGNORECASE,
)
_HOW_TO = re.compile(r"\bhow (?:to|do i|can i|should i) ([^?.!\n]{3,60})", re.IGNORECASE)


def slug(text: str) -> str:
    """Lower-case words joined by ``-`` (the form of labels and procedure names)."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))[:64] or "item"


def read_turns(conversation: str) -> list[dict[str, Any]]:
    """The turns of a prompt: every line that is a JSON object with role and content.

    Turns that try to give the extractor instructions are left out.
    """
    turns: list[dict[str, Any]] = []
    for line in conversation.splitlines():
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not (isinstance(value, dict) and isinstance(value.get("content"), str)):
            continue
        if "role" in value and not _INJECTION.search(value["content"]):
            turns.append(value)
    return turns


def _cite(turn: Mapping[str, Any]) -> list[int]:
    """The seq of ``turn`` as a citation (SPEC L4): every stand-in item cites its turns."""
    seq = turn.get("seq")
    return [seq] if isinstance(seq, int) else []


def _semantic(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: dict[str, dict[str, Any]] = {}
    named = len({t.get("speaker") for t in turns if t.get("speaker")}) > 1
    for turn in turns:
        if turn.get("role") != "user":
            continue
        text = turn["content"]
        speaker = turn.get("speaker") if named else None
        for attr, value in _MY_X_IS.findall(text):
            attr, value = attr.strip().lower(), value.strip()
            if isinstance(speaker, str):  # people talking: the fact is the speaker's
                label = slug(f"{speaker} {attr}")
                items[label] = {
                    "label": label,
                    "fact": f"{speaker}'s {attr} is {value}.",
                    "subject": speaker,
                    "seqs": _cite(turn),
                }
                continue
            items[slug(attr)] = {
                "label": slug(attr),
                "fact": f"The user's {attr} is {value}.",
                "seqs": _cite(turn),
            }
        for place in _LIVE_IN.findall(text):
            items["home-city"] = {
                "label": "home-city",
                "fact": f"The user lives in {place}.",
                "seqs": _cite(turn),
            }
        for name in _CALL_ME.findall(text):
            items["preferred-name"] = {
                "label": "preferred-name",
                "fact": f"The user wants to be called {name}.",
                "seqs": _cite(turn),
            }
    return list(items.values())


def _taxonomic(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: dict[tuple[str, str], dict[str, Any]] = {}
    for turn in turns:
        text = turn["content"]
        found = _DOMAIN.search(text)
        domain = slug(found.group(1)) if found else "general"
        for term, definition in _MEANS.findall(text):
            term = term.strip().lower()
            if term in {"it", "this", "that", "which", "what"}:
                continue
            definition = definition.strip()
            definition = definition[0].upper() + definition[1:]
            items[(domain, term)] = {
                "domain": domain,
                "term": term,
                "definition": definition.rstrip(".") + ".",
                "seqs": _cite(turn),
            }
    return list(items.values())


def _procedural(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    goal: str | None = None
    for turn in turns:
        text = turn["content"]
        asked = _HOW_TO.search(text)
        if asked:
            goal = asked.group(1).strip()
        steps = [step for _, step in _STEP.findall(text)]
        if len(steps) >= 2:
            name = slug(goal) if goal else f"procedure-{len(items) + 1}"
            items.append(
                {
                    "name": name,
                    "description": f"How to {goal}." if goal else "A step-by-step procedure.",
                    "steps": steps,
                    "seqs": _cite(turn),
                }
            )
    return items


def _episodic(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(turns) < 2:
        return []
    first_user = next((t["content"] for t in turns if t.get("role") == "user"), turns[0]["content"])
    title = " ".join(first_user.split()[:8]).rstrip(".,!?")
    said = " ".join(first_user.split()[:40])
    answers = [t["content"] for t in turns if t.get("role") == "assistant"]
    account = f"The user said: {said}"
    if answers:
        account += f" The assistant answered: {' '.join(answers[-1].split()[:40])}"
    roles = sorted({str(t.get("role")) for t in turns})
    return [
        {
            "title": title or "Conversation",
            "account": account,
            "participants": roles,
            "valid_from": str(turns[0].get("at") or "")[:10] or None,
            "seqs": sorted({s for t in turns for s in _cite(t)}),
        }
    ]


_RULES = {
    "semantic": _semantic,
    "episodic": _episodic,
    "procedural": _procedural,
    "taxonomic": _taxonomic,
}


def _item_properties(schema: Mapping[str, Any] | None) -> list[str] | None:
    """The property names of one item of the ``items`` array in ``schema``."""
    if not schema:
        return None
    items = schema.get("properties", {}).get("items", {}).get("items", {})
    if "$ref" in items:
        ref = str(items["$ref"]).rsplit("/", 1)[-1]
        items = schema.get("$defs", {}).get(ref, {})
    props = items.get("properties")
    return list(props) if isinstance(props, Mapping) else None


def _verdicts(text: str) -> dict[str, Any]:
    """A batch of judge questions (``{"questions": [{"id": …, …}]}``, see
    :meth:`~mongomem.ltm.judge.LLMJudge.judge_many`): one :func:`_verdict` per id."""
    try:
        questions = json.loads(text)["questions"]
        answers = [(str(q["id"]), _verdict_of(q)) for q in questions]
    except (ValueError, TypeError, KeyError):
        return {"verdicts": []}  # nothing read: every question is asked alone
    return {"verdicts": [{"id": qid, **verdict} for qid, verdict in answers]}


def _verdict(text: str) -> dict[str, Any]:
    """The reconciler's judge question (the JSON of
    :meth:`~mongomem.ltm.judge.JudgeQuestion.render`): the same text → REINFORCE,
    the same key with another text → UPDATE, else ADD. No reading of meaning at all."""
    try:
        question = json.loads(text)
    except ValueError:
        return {"action": "ADD", "reason": "stand-in: could not read the question"}
    return _verdict_of(question)


def _verdict_of(question: Any) -> dict[str, Any]:
    try:
        old_key, old_text = question["existing"]["key"], question["existing"]["text"]
        new_key, new_text = question["new"]["key"], question["new"]["text"]
    except (ValueError, TypeError, KeyError):
        return {"action": "ADD", "reason": "stand-in: could not read the question"}
    if " ".join(str(old_text).lower().split()) == " ".join(str(new_text).lower().split()):
        return {"action": "REINFORCE", "reason": "stand-in: the same text"}
    if old_key == new_key:
        return {"action": "UPDATE", "reason": "stand-in: the same key, a different text"}
    return {"action": "ADD", "reason": "stand-in: different keys"}


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _eval_answer(text: str) -> dict[str, Any]:
    """The material's line sharing most words with the ``Question:`` line (eval prompt)."""
    first, _, material = text.partition("\n\n")
    asked = _words(first.partition(":")[2])
    lines = [ln.strip() for ln in material.splitlines()[1:] if ln.strip()]
    best = max(lines, key=lambda ln: len(asked & _words(ln)), default="")
    return {"answer": best if best and asked & _words(best) else "I do not know."}


def _eval_judge(text: str) -> dict[str, Any]:
    gold = re.search(r"^Gold answer: (.*)$", text, re.MULTILINE)
    generated = re.search(r"^Generated answer: (.*)$", text, re.MULTILINE)
    if gold is None or generated is None:
        return {"reason": "stand-in: could not read the question", "label": "WRONG"}
    hit = bool(_words(gold.group(1))) and _words(gold.group(1)) <= _words(generated.group(1))
    return {"reason": "stand-in: word overlap only", "label": "CORRECT" if hit else "WRONG"}


def _summary(text: str) -> dict[str, Any]:
    """A space key's "summary" (a file's, a long text's): its first 120 words, verbatim.
    Rules, NOT a model's summary; a file of no words is summarised by its name."""
    name, _, body = text.partition("\n\n") if text.startswith("File name: ") else ("", "", text)
    words = body.split()[:120] or name.removeprefix("File name: ").split() or ["(empty)"]
    return {"summary": " ".join(words)[:4000]}


class StandInResponder:
    """Answers extraction (and reconcile-verdict) requests by rules. NOT a model."""

    def __call__(self, request: ChatRequest) -> Answer:
        if request.schema_name == "reconcile_verdict":
            return Answer(_verdict(request.text("user")), model=STAND_IN_MODEL)
        if request.schema_name == "reconcile_verdicts":
            return Answer(_verdicts(request.text("user")), model=STAND_IN_MODEL)
        if request.schema_name == "eval_answer":
            return Answer(_eval_answer(request.text("user")), model=STAND_IN_MODEL)
        if request.schema_name == "eval_judge":
            return Answer(_eval_judge(request.text("user")), model=STAND_IN_MODEL)
        if request.schema_name == "space_key_summary":
            return Answer(_summary(request.text("user")), model=STAND_IN_MODEL)
        memory_type = (request.schema_name or "").removeprefix("extract_")
        rule = _RULES.get(memory_type)
        turns = read_turns(request.text("user"))
        found = rule(turns) if rule is not None else []
        props = _item_properties(request.schema)
        if props is not None:
            found = [{p: item.get(p) for p in props} for item in found]
        return Answer({"items": found}, model=STAND_IN_MODEL)
