"""Evidence recall in the eval harness (SPEC M3): dataset turn ids, both LoCoMo layouts,
image captions, LongMemEval evidence, the recall summary, empty answers, the
extraction model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mongomem.evaluation.datasets import read_locomo, read_longmemeval
from mongomem.evaluation.harness import EvalOptions, _question
from mongomem.evaluation.report import write_report
from mongomem.evaluation.retrieval import recall_summary, render, turn_metadata
from mongomem.operations.usage import MemoryUsageRecorder
from mongomem.sdk.models import MemoryContext
from mongomem.settings import Settings

DATA = Path(__file__).parent.parent / "data" / "eval"


def test_locomo_turns_keep_their_dia_id_and_speaker() -> None:
    [conv, _] = read_locomo(DATA / "locomo_tiny.json")
    first = conv.sessions[0].turns[0]
    assert first.dataset_id == "D1:1"
    assert first.speaker == "Ana"
    assert conv.questions[0].evidence == ("D1:1",)
    assert turn_metadata(first.dataset_id, first.speaker) == {
        "dataset_id": "D1:1",
        "speaker": "Ana",
    }
    assert turn_metadata(None, None) is None


def test_both_locomo_layouts_read_the_same(tmp_path: Path) -> None:
    listed = read_locomo(DATA / "locomo_tiny.json")
    samples = json.loads((DATA / "locomo_tiny.json").read_text())
    folder = tmp_path / "conversations"
    folder.mkdir()
    for sample in samples:  # per-conversation objects: the conversation's keys at the top
        flat = {"sample_id": sample["sample_id"], **sample["conversation"], "qa": sample["qa"]}
        (folder / f"{sample['sample_id']}.json").write_text(json.dumps(flat))
    assert read_locomo(folder) == listed
    single = read_locomo(folder / "tiny-1.json")
    assert single == listed[:1]


def test_a_blip_caption_is_part_of_the_turn_text(tmp_path: Path) -> None:
    sample = {
        "sample_id": "img",
        "speaker_a": "Ana",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {
                "speaker": "Ana",
                "dia_id": "D1:1",
                "text": "Look at this!",
                "img_url": ["http://example.invalid/x.jpg"],
                "blip_caption": "a photo of a red kayak on a lake",
            },
            {"speaker": "Bo", "dia_id": "D1:2", "text": "", "blip_caption": "a dog on a sofa"},
        ],
        "qa": [{"question": "What boat?", "answer": "kayak", "evidence": ["D1:1"], "category": 1}],
    }
    path = tmp_path / "img.json"
    path.write_text(json.dumps(sample))
    [conv] = read_locomo(path)
    turns = conv.sessions[0].turns
    assert (
        turns[0].content == "Ana: Look at this! [shares an image: a photo of a red kayak on a lake]"
    )
    assert turns[1].content == "Bo: [shares an image: a dog on a sofa]"


def _longmemeval(tmp_path: Path, marked: bool) -> Path:
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "Where did I park?",
        "answer": "Level 3",
        "question_date": "2023/05/30 (Tue) 10:00",
        "haystack_session_ids": ["sa", "sb"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 09:00"],
        "answer_session_ids": ["sb"],
        "haystack_sessions": [
            [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}],
            [
                {"role": "user", "content": "I parked on level 3.", "has_answer": marked},
                {"role": "assistant", "content": "Noted."},
            ],
        ],
    }
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([item]))
    return path


def test_longmemeval_evidence_is_the_marked_turns_else_the_answer_sessions(
    tmp_path: Path,
) -> None:
    [conv] = read_longmemeval(_longmemeval(tmp_path, marked=True))
    assert conv.questions[0].evidence == ("sb#0",)
    assert [t.dataset_id for s in conv.sessions for t in s.turns] == [
        "sa#0",
        "sa#1",
        "sb#0",
        "sb#1",
    ]
    [conv] = read_longmemeval(_longmemeval(tmp_path, marked=False))
    assert conv.questions[0].evidence == ("sb#0", "sb#1")


def test_recall_summary_counts_found_questions_and_mrr() -> None:
    rows: list[dict[str, Any]] = [
        {"category": "1", "gold": ["a"], "found": ["x", "a", *["y"] * 18]},  # rank 2
        {"category": "1", "gold": ["b", "c"], "found": [*["y"] * 7, "c", *["y"] * 12]},  # rank 8
        {"category": "2", "gold": ["d"], "found": [None] * 20},  # not found
        {"category": "2", "gold": [], "found": ["d"]},  # no evidence: not scored
    ]
    summary = recall_summary(rows)
    assert summary["all"]["questions"] == 3
    assert summary["all"]["no_evidence"] == 1
    assert summary["all"]["recall@5"] == round(1 / 3, 4)
    assert summary["all"]["recall@10"] == round(2 / 3, 4)
    assert summary["1"]["evidence@10"] == round((1 + 0.5) / 2, 4)
    assert summary["all"]["mrr"] == round((1 / 2 + 1 / 8) / 3, 4)
    assert summary["2"]["recall@20"] == 0.0
    text = render(
        {
            "benchmark": "locomo",
            "data": "x.json",
            "mode": "retrieval-only (no LLM)",
            "embedder": "hashing",
            "ranker": "r",
            "command": "mongomem eval",
            "conversations": 1,
            "finished_at": "now",
            "categories": summary,
        }
    )
    assert "| all | 3 | 33.3% | 66.7% | 66.7% | 0.208 |" in text


@dataclass
class _Usage:
    prompt_tokens: int = 5
    completion_tokens: int = 1
    total_tokens: int = 6


@dataclass
class _Result:
    value: Any
    model: str
    usage: _Usage


class _AnswersEmpty:
    """An LLM double that answers nothing, and records whether the judge was asked."""

    name = "double (not a model)"

    def __init__(self) -> None:
        self.judged = 0

    async def structured(self, messages: Any, schema: Any, *, schema_name: str, meter: Any) -> Any:
        if schema_name == "eval_judge":
            self.judged += 1
            return _Result(schema(label="CORRECT", reason="?"), "double", _Usage())
        return _Result(schema(answer="  "), "double", _Usage())


class _Memory:
    def bind(self, ctx: Any) -> _Memory:
        return self

    async def build_context(self, query: str, **kw: Any) -> MemoryContext:
        return MemoryContext(query=query, text="")


async def test_an_empty_answer_is_wrong_without_asking_the_judge(tmp_path: Path) -> None:
    [conv, _] = read_locomo(DATA / "locomo_tiny.json")
    llm = _AnswersEmpty()
    options = EvalOptions(out=tmp_path, data=DATA / "locomo_tiny.json", command=["x"])
    line = await _question(
        llm,  # type: ignore[arg-type]
        _Memory(),  # type: ignore[arg-type]
        MemoryUsageRecorder(),  # type: ignore[arg-type]
        conv,
        conv.questions[0],
        "u",
        "p",
        options,
    )
    assert llm.judged == 0
    assert line["memory"]["label"] == "WRONG"
    assert line["full"]["label"] == "WRONG"


def test_the_report_names_the_model_that_extracted(tmp_path: Path) -> None:
    header = {
        "kind": "run",
        "id": "r1",
        "benchmark": "locomo",
        "data": "d.json",
        "data_sha256": "0",
        "started_at": "2024-01-01T00:00:00+00:00",
        "command": "mongomem eval locomo --data d.json",
        "answer_prompt": "answer_v1",
        "judge_prompt": "judge_v1",
    }
    extraction = {"snapshots": 1, "calls": 1, "prompt_tokens": 1, "completion_tokens": 1}
    convs = [{"id": "c", "extraction": extraction | {"models": ["stand-in (NOT a real model)"]}}]
    report = write_report(
        header,
        convs,
        [],
        tmp_path,
        settings=Settings(),
        llm_name="real-llm",
        finished_at=datetime.now(UTC),
    )
    assert report["extraction_model"] == "stand-in (NOT a real model)"
    assert report["not_a_quality_score"] is True
    nothing = write_report(
        header,
        [{"id": "c", "extraction": extraction}],
        [],
        tmp_path,
        settings=Settings(),
        llm_name="real-llm",
        finished_at=datetime.now(UTC),
    )
    assert nothing["extraction_model"] == "(no extraction call recorded)"
