"""The Python snippets of docs/reference/cli-and-settings.md run as written, in a new
process with no MONGOMEM_* variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli-and-settings.md"


def test_the_python_snippets_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert blocks
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
