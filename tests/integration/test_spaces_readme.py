"""The memory-spaces usage example runs as written, as its own process (SPEC H)."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest
from pymongo import AsyncMongoClient

from pipeline.mongo import Document

pytestmark = pytest.mark.integration

EXAMPLE = textwrap.dedent(
    """
    import asyncio

    from pipeline.settings import load_settings
    from pipeline.spaces import AsyncSpaces, Merge

    async def main() -> None:
        async with AsyncSpaces(load_settings(), project_id="support") as spaces:
            await spaces.create_space(
                "refunds",
                keys=[{"argument": "question", "weight": 2}, {"argument": "tier"}],
                recall={"threshold": 0.4, "top_k": 3, "mode": "hybrid"},
            )
            await spaces.attach_agent("refunds", "triage-agent")  # inherits the space's keys
            await spaces.add_item(
                "refunds",
                inputs={"question": "Refund for a blender that arrived broken", "tier": "gold"},
                outputs={"reply": "Refund approved, no return needed."},
                outcome="refund approved",
                comment="Right call for a gold customer",
                sentiment="positive",
            )
            again = await spaces.add_item(
                "refunds",
                inputs={"question": "Refund for a blender that arrived broken!", "tier": "gold"},
                comment="Fast and friendly",
                sentiment="positive",
            )
            print(again.action, len(again.duplicates))  # needs-choice 1: nothing stored yet
            merged = await spaces.add_item(
                "refunds",
                inputs={"question": "Refund for a blender that arrived broken!", "tier": "gold"},
                comment="Fast and friendly",
                sentiment="positive",
                on_duplicate=Merge(),
            )
            print(merged.action)  # merged

            hits = await spaces.recall(
                "refunds", {"question": "my blender came broken, refund?", "tier": "gold"}
            )
            for hit in hits:
                print(f"{hit.score:.2f}", hit.item.outcome)

            await spaces.create_space(
                "escalations", kind="escalation", keys=[{"argument": "question"}],
                recall={"threshold": 0.8},
            )
            await spaces.resolve_escalation(
                "escalations",
                inputs={"question": "Refund over 500 EUR for a damaged TV"},
                resolution="Approved by the team lead: photo shows transport damage.",
                outcome="approve",
            )
            decision = await spaces.check_escalation(
                "escalations", {"question": "Refund over 500 EUR for a damaged TV"}
            )
            print("apply" if decision.apply else "raise", decision.outcome)  # apply approve

            backup = await spaces.export_space("refunds")  # JSON lines
            print(len(backup), "lines")  # 2 lines: header + 1 item

    asyncio.run(main())
    """
)


async def test_the_example_runs_as_written(
    subprocess_env: dict[str, str], mongo: AsyncMongoClient[Document]
) -> None:
    env = {**subprocess_env, "MONGOMEM_EMBEDDING_PROVIDER": "stand-in"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", EXAMPLE, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "needs-choice 1"
    assert lines[1] == "merged"
    assert lines[2].endswith(" refund approved")
    assert lines[-2] == "apply approve"
    assert lines[-1] == "2 lines"
