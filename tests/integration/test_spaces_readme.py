"""The README's memory-spaces example runs as written, as its own process (SPEC H)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import Document

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "from mongomem.spaces import" in b]
    return str(example)


async def test_the_example_runs_as_written(
    subprocess_env: dict[str, str], mongo: AsyncMongoClient[Document]
) -> None:
    env = {**subprocess_env, "MONGOMEM_EMBEDDING_PROVIDER": "stand-in"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        readme_example(),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "needs-choice 1"
    assert lines[1] == "merged"
    assert lines[2].endswith(" refund approved")
    assert lines[-2] == "apply approve"
    assert lines[-1] == "2 lines"
