"""The default windowing engine (aiokafka) runs without the `faust` extra, so the
`stages` extra alone runs the pipeline (as the OpenAI Agents integration's extras test
does): only ``engine="faust"`` imports faust."""

from __future__ import annotations

import subprocess
import sys

#: In a new interpreter (this one's modules stay as they are): faust as if not installed,
#: then every stage the CLI runs, and the windowing worker.
CHECK = """
import importlib, sys
sys.modules["faust"] = None
from mongomem.cli.main import STAGES
for target in STAGES.values():
    module, _, entry = target.partition(":")
    assert callable(getattr(importlib.import_module(module), entry)), target
importlib.import_module("mongomem.stages.windowing.worker")
assert "mongomem.stages.windowing.app" not in sys.modules, "the faust adapter was imported"
print("ok")
"""


def test_every_stage_and_the_windowing_worker_import_without_faust() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=False, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "ok"
