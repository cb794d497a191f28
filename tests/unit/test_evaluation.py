"""The eval readers, report and stand-in rules (issue 16; SPEC K5), without servers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mongomem.errors import ConfigError, InputError
from mongomem.evaluation.datasets import read_locomo, read_longmemeval
from mongomem.evaluation.harness import (
    Checkpoint,
    EvalVerdict,
    ProgressBar,
    answer_messages,
    judge_messages,
)
from mongomem.evaluation.report import NOT_A_SCORE, percentile, summarize, write_report
from mongomem.settings import load_settings
from mongomem.testing import STAND_IN_MODEL, StandInResponder
from mongomem.testing.replies import ChatRequest

DATA = Path(__file__).parent.parent / "data" / "eval"


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    return path


def test_locomo_reader_reads_sessions_with_their_times_and_skips_adversarial() -> None:
    convs = read_locomo(DATA / "locomo_tiny.json")
    assert [c.conversation_id for c in convs] == ["tiny-1", "tiny-2"]
    first = convs[0]
    assert [s.name for s in first.sessions] == ["session_1", "session_2"]
    assert first.sessions[0].at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turns = first.sessions[0].turns
    assert [t.role for t in turns] == ["user", "user", "user"]  # two people, no assistant
    assert [t.speaker for t in turns] == ["Ana", "Bo", "Ana"]
    assert turns[0].content == "Ana: Hi Bo! My home airport is Boston."
    assert turns[1].at > turns[0].at
    assert [q.category for q in first.questions] == ["4", "1", "2"]  # category 5 left out
    assert first.questions[0].evidence == ("D1:1",)
    assert "session_2 (2023-06-27 10:37 UTC)" in first.transcript()


def test_longmemeval_reader_reads_haystacks_dates_and_abstention() -> None:
    convs = read_longmemeval(DATA / "longmemeval_tiny.json")
    assert [c.conversation_id for c in convs] == ["tiny_q1", "tiny_q2", "tiny_q3_abs"]
    q1 = convs[0]
    assert [s.at for s in q1.sessions] == [
        datetime(2023, 5, 20, 2, 21, tzinfo=UTC),
        datetime(2023, 5, 22, 18, 5, tzinfo=UTC),
    ]
    assert q1.sessions[0].name == "001-s_a"
    assert q1.questions[0].question_date == "2023/06/01 (Thu) 09:00"
    assert convs[2].questions[0].category == "single-session-user (abstention)"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        # one object is a per-conversation file now (issue 27); this one has no sessions
        ({"not": "a conversation"}, "'conversation' object or session_<N> lists"),
        ([], "non-empty JSON list"),
        ([{"sample_id": "x", "conversation": {"speaker_a": "A"}, "qa": []}], "no session_<N>"),
        (
            [
                {
                    "sample_id": "x",
                    "conversation": {"session_1": [{"speaker": "A", "text": "hi"}]},
                    "qa": [],
                }
            ],
            "no session_1_date_time",
        ),
        (
            [{"sample_id": "x", "conversation": {"session_1": [], "session_1_date_time": "May 8"}}],
            "is not like",
        ),
        (
            [
                {
                    "sample_id": "x",
                    "conversation": {
                        "session_1": [],
                        "session_1_date_time": "1:56 pm on 8 May, 2023",
                    },
                    "qa": [{"question": "q?", "category": 1}],
                }
            ],
            "field 'answer'",
        ),
    ],
)
def test_locomo_reader_refuses_bad_files_naming_the_place(
    tmp_path: Path, data: Any, says: str
) -> None:
    with pytest.raises(InputError, match=says):
        read_locomo(write(tmp_path, data))


def test_longmemeval_reader_refuses_mismatched_dates_and_roles(tmp_path: Path) -> None:
    item = {
        "question_id": "q",
        "question_type": "t",
        "question": "?",
        "answer": "a",
        "haystack_sessions": [[{"role": "user", "content": "hi"}]],
        "haystack_dates": [],
    }
    with pytest.raises(InputError, match="1 haystack_sessions but 0 haystack_dates"):
        read_longmemeval(write(tmp_path, [item]))
    item["haystack_dates"] = ["2023/05/20 (Sat) 02:21"]
    item["haystack_sessions"] = [[{"role": "system", "content": "hi"}]]
    with pytest.raises(InputError, match="role 'system'"):
        read_longmemeval(write(tmp_path, [item]))
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(InputError, match="not JSON"):
        read_longmemeval(tmp_path / "bad.json")


def test_percentile_by_nearest_rank() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([5.0], 0.95) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.50) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def row(category: str, label_memory: str, label_full: str, model: str) -> dict[str, Any]:
    arm = {
        "context_tokens": 100,
        "answer_tokens": 5,
        "judge_tokens": 50,
        "calls": 2,
        "model": model,
        "judge_model": model,
    }
    return {
        "category": category,
        "search_s": 0.01,
        "memory": {**arm, "label": label_memory},
        "full": {**arm, "label": label_full},
    }


def test_summary_gives_j_per_category_and_all() -> None:
    rows = [
        row("1", "CORRECT", "CORRECT", "m"),
        row("1", "WRONG", "CORRECT", "m"),
        row("2", "WRONG", "WRONG", "m"),
    ]
    summary = summarize(rows)
    assert summary["1"]["memory"]["j"] == 50.0
    assert summary["1"]["full"]["j"] == 100.0
    assert summary["all"]["questions"] == 3
    assert summary["all"]["memory"]["llm_calls"] == 6
    assert summary["all"]["search_ms_p95"] == 10.0


def header() -> dict[str, Any]:
    return {
        "kind": "run",
        "id": "r1",
        "benchmark": "locomo",
        "data": "d.json",
        "data_sha256": "0" * 64,
        "started_at": "2026-01-01T00:00:00+00:00",
        "command": "mongomem eval locomo --data d.json",
        "answer_prompt": "answer_v1",
        "judge_prompt": "judge_v1",
    }


@pytest.mark.parametrize(("model", "flagged"), [(STAND_IN_MODEL, True), ("gpt-4o-mini", False)])
def test_report_first_line_says_not_a_score_only_for_the_stand_in(
    tmp_path: Path, model: str, flagged: bool
) -> None:
    conv = [
        {
            "id": "c",
            "extraction": {"snapshots": 1, "calls": 4, "prompt_tokens": 10, "completion_tokens": 3},
        }
    ]
    report = write_report(
        header(),
        conv,
        [row("1", "CORRECT", "WRONG", model)],
        tmp_path,
        settings=load_settings(),
        llm_name="openai-compatible:x",
        finished_at=datetime.now(UTC),
    )
    first = (tmp_path / "report.md").read_text().splitlines()[0]
    assert (first == NOT_A_SCORE) is flagged
    assert report["not_a_quality_score"] is flagged
    assert "| c | 1 | 4 | 10 | 3 |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["command"] == header()["command"]


def test_checkpoint_drops_a_last_line_cut_short_but_refuses_a_broken_middle(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoint.jsonl"
    path.write_text('{"kind": "question", "id": "a"}\n{"kind": "quest')
    assert Checkpoint(path).done("question") == {"a"}
    path.write_text('{"kind": "quest\n{"kind": "question", "id": "a"}\n')
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        Checkpoint(path)


def test_progress_bar_draws_counts(tmp_path: Path) -> None:
    import io

    out = io.StringIO()
    bar = ProgressBar(4, out, done=1)
    bar.step("q2")
    assert "2/4 questions" in out.getvalue()
    assert "[" + "#" * 15 + "." * 15 + "]" in out.getvalue()


def ask(schema_name: str, messages: list[Any]) -> dict[str, Any]:
    body = {
        "messages": messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": {}},
        },
    }
    answer = StandInResponder()(ChatRequest(body=body))
    assert answer.model == STAND_IN_MODEL
    content: dict[str, Any] = answer.content  # type: ignore[assignment]
    return content


def test_stand_in_answers_and_judges_eval_prompts_by_word_overlap() -> None:
    convs = read_locomo(DATA / "locomo_tiny.json")
    question = convs[0].questions[0]
    messages = answer_messages(question, convs[0].transcript(), "Conversation")
    answer = ask("eval_answer", list(messages))["answer"]
    assert "Boston" in answer
    verdict = ask("eval_judge", list(judge_messages(question, answer)))
    assert EvalVerdict.model_validate(verdict).label == "CORRECT"
    wrong = ask("eval_judge", list(judge_messages(question, "Denver")))
    assert wrong["label"] == "WRONG"
