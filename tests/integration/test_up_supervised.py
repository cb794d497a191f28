"""`mongomem up` heals: a SIGKILLed stage comes back, `status` counts the restart and
names the LLM, a re-run from a shell without the LLM variables is refused.

`up` runs as a real process in a temporary state folder against the test servers
(given by URI, so no fixed ports), with the scripted fake LLM as its endpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mongomem.local.servers import pid_alive
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.integration

KEY = "sk-test-not-to-be-printed"


def _cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mongomem.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _pid(stage_dir: Path, name: str) -> int | None:
    try:
        pid = int((stage_dir / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


@pytest.fixture
def up_env(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    with stand_in_llm() as llm:
        env = {
            **subprocess_env,
            "MONGOMEM_INFRA_STATE_DIR": str(tmp_path / "state"),
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": KEY,
            "MONGOMEM_LLM_MODEL": "scripted-fake",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_ENABLED_EXTRACTIONS": "semantic",
        }
        try:
            yield env
        finally:
            _cli(env, "down", timeout=120)


def test_a_killed_stage_is_restarted_and_status_shows_it(up_env: dict[str, str]) -> None:
    stage_dir = Path(up_env["MONGOMEM_INFRA_STATE_DIR"]) / "stages"
    started = _cli(up_env, "up", "--no-demo")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "supervisor" in started.stdout
    assert "fetches jars" not in started.stdout  # servers given by URI: no jars to fetch
    first = _pid(stage_dir, "windowing")
    assert first is not None

    os.kill(first, signal.SIGKILL)
    for _ in range(600):  # polled every 0.1 s: at most 60 s
        again = _pid(stage_dir, "windowing")
        if again is not None and again != first:
            break
        time.sleep(0.1)
    else:
        log = (stage_dir / "logs" / "supervisor.log").read_text()
        raise AssertionError(f"windowing was not restarted; supervisor log:\n{log}")

    status = _cli(up_env, "status")
    lines = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    assert "restarted 1x" in lines["windowing"], status.stdout
    assert "restarted" not in lines["watcher"]
    assert f"LLM: {up_env['MONGOMEM_LLM_BASE_URL']}  model scripted-fake  stand-in: no" in (
        status.stdout
    )
    assert KEY not in status.stdout + status.stderr

    # Re-run from a shell without the LLM variables: refused, nothing restarted on the stand-in.
    bare = {k: v for k, v in up_env.items() if not k.startswith("MONGOMEM_LLM_")}
    refused = _cli(bare, "up", "--no-demo")
    assert refused.returncode == 1
    assert up_env["MONGOMEM_LLM_BASE_URL"] in refused.stderr
    assert "MONGOMEM_LLM_BASE_URL" in refused.stderr
    assert _pid(stage_dir, "windowing") == again
    assert _pid(stage_dir, "llm-stand-in") is None

    stopped = _cli(up_env, "down", timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "supervisor" in stopped.stdout
    assert _pid(stage_dir, "windowing") is None
