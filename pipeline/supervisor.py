"""Stages as separate processes: start, stop, status (``make run`` / ``make stop``).

Each stage runs as ``python -m mongomem.cli run <stage> [args]`` in its own
process group, with a pid file and a log file in the state folder. The end-to-
end tests use the same class to SIGKILL and restart stages.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mongomem.infra.local import LocalServer

__all__ = ["StageProcess", "stage_env"]


@dataclass(kw_only=True)
class StageProcess(LocalServer):
    """One stage process. ``name`` is unique per instance (``extractor-semantic``)."""

    port: int = 0
    stage: str
    args: Sequence[str] = field(default_factory=tuple)
    settle_s: float = 0.5

    def _ports(self) -> tuple[int, ...]:
        return ()

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "mongomem.cli", "run", self.stage, *self.args]

    def _ready(self) -> bool:
        # A stage has no port to probe: alive after a short settle is "started".
        # Whether it makes progress is what `mongomem status` (lag) reports.
        time.sleep(self.settle_s)
        return self.process is not None and self.process.poll() is None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def stage_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment of a stage process: ``base`` plus ``overrides``."""
    env = dict(base)
    env.update(overrides)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
