"""``mongomem eval locomo|longmemeval --data PATH [--out DIR]``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mongomem.evaluation.datasets import BENCHMARKS, read_dataset

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["add_cli"]


def _retrieval_only(args: argparse.Namespace, settings: Settings, conversations: Any) -> int:
    from mongomem.evaluation.retrieval import KS, RetrievalOptions, run_retrieval

    out = args.out or Path("eval-results") / f"{args.benchmark}-{args.data.stem}-retrieval"
    options = RetrievalOptions(out=out, data=args.data, command=["mongomem", *sys.argv[1:]])
    report = asyncio.run(run_retrieval(args.benchmark, conversations, settings, options))
    every = report["categories"]["all"]
    cells = ", ".join(f"recall@{k} {every[f'recall@{k}']}" for k in KS)
    print(f"turn search over {every['questions']} questions: {cells}, MRR {every['mrr']}")
    print(f"report: {out / 'retrieval.md'} and {out / 'retrieval.json'}")
    return 0


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.adapters.llm import make_llm
    from mongomem.evaluation.harness import EvalOptions, run_eval

    conversations = read_dataset(args.benchmark, args.data)  # all checked before any write
    if args.conversations is not None:
        conversations = conversations[: args.conversations]
    if args.retrieval_only:
        return _retrieval_only(args, settings, conversations)
    out = args.out or Path("eval-results") / f"{args.benchmark}-{args.data.stem}"
    options = EvalOptions(
        out=out,
        data=args.data,
        command=["mongomem", *sys.argv[1:]],
        limit_per_type=args.limit_per_type,
        max_chars=args.max_chars,
        wait_timeout_s=args.wait_timeout,
    )

    async def go() -> dict[str, Any]:
        llm = make_llm(settings.llm)
        try:
            return await run_eval(args.benchmark, conversations, settings, llm, options)
        finally:
            await llm.close()

    report = asyncio.run(go())
    every = report["categories"].get("all")
    if report["not_a_quality_score"]:
        print("NOT A QUALITY SCORE: the LLM was the rule-based stand-in (NOT a model)")
    if every is not None:
        print(
            f"J memory {every['memory']['j']} / full context {every['full']['j']} "
            f"over {every['questions']} questions"
        )
    print(f"report: {out / 'report.md'} and {out / 'report.json'}")
    return 0


def add_cli(sub: Any) -> None:
    """Add ``eval`` to the ``mongomem`` parser's subcommands."""
    p = sub.add_parser("eval", help="score memory on LoCoMo/LongMemEval vs full context")
    p.add_argument("benchmark", choices=BENCHMARKS, help="which benchmark the data file is")
    p.add_argument(
        "--data",
        type=Path,
        required=True,
        help="the benchmark's JSON file (LoCoMo: also a folder of per-conversation files)",
    )
    p.add_argument(
        "--retrieval-only",
        action="store_true",
        help="no LLM: record the turns and report recall@5/10/20 and MRR of turn search "
        "against the gold evidence turns, per category",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results and checkpoint folder (default eval-results/<benchmark>-<file>); "
        "rerun with the same one to resume",
    )
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    p.add_argument("--limit-per-type", type=int, default=5, help="build_context limit_per_type")
    p.add_argument("--max-chars", type=int, default=4000, help="build_context max_chars")
    p.add_argument(
        "--wait-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for extraction per session",
    )
    p.set_defaults(handler=_eval)
