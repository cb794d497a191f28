"""`mongomem up` supervises the local servers too (issue 25): a SIGKILLed Kafka broker
comes back by itself, and `status` counts the restart.

It stayed dead (120 s watched) while the stages logged errors. Here `up` runs as
a real process and starts its own local servers (Kafka and mongo-java-server)
on free ports in a temporary state folder, with the jars of the test servers.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mongomem.local.servers import pid_alive
from mongomem.settings import load_settings
from mongomem.testing.harness import stand_in_llm

pytestmark = pytest.mark.integration


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mongomem.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _free_pair() -> int:
    """A free port whose next one is free too (Kafka's controller listens there)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free ports in a row")


def _pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


@pytest.fixture
def up_env(subprocess_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    state = tmp_path / "state"
    state.mkdir()
    # the jars the test servers run from: nothing is fetched
    (state / "cache").symlink_to(load_settings().infra.state_dir.resolve() / "cache")
    given = ("MONGOMEM_MONGODB_URI", "MONGOMEM_KAFKA_BOOTSTRAP")
    base = {k: v for k, v in subprocess_env.items() if k not in given}
    with stand_in_llm() as llm:
        env = {
            **base,
            "MONGOMEM_INFRA_STATE_DIR": str(state),
            "MONGOMEM_INFRA_MODE": "local",
            "MONGOMEM_INFRA_KAFKA_PORT": str(_free_pair()),
            "MONGOMEM_INFRA_MONGO_PORT": str(_free_pair()),
            "MONGOMEM_LLM_BASE_URL": llm.base_url,
            "MONGOMEM_LLM_API_KEY": "sk-test",
            "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
            "MONGOMEM_ENABLED_EXTRACTIONS": "semantic",
        }
        try:
            yield env
        finally:
            _cli(env, "down", timeout=180)


def test_a_killed_broker_comes_back_and_status_counts_it(up_env: dict[str, str]) -> None:
    state = Path(up_env["MONGOMEM_INFRA_STATE_DIR"])
    started = _cli(up_env, "up", "--no-demo")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "restarts stopped stages and mongo and kafka" in started.stdout, started.stdout
    pid_file = state / "kafka" / "kafka.pid"
    first = _pid(pid_file)
    assert first is not None

    os.killpg(first, signal.SIGKILL)
    for _ in range(1800):  # polled every 0.1 s: at most 180 s (a loaded machine)
        again = _pid(pid_file)
        if again is not None and again != first:
            break
        time.sleep(0.1)
    else:
        log = (state / "stages" / "logs" / "supervisor.log").read_text()
        raise AssertionError(f"kafka was not restarted; supervisor log:\n{log}")

    for _ in range(120):  # the restart is counted once the start is under way
        status = _cli(up_env, "status")
        kafka = [line for line in status.stdout.splitlines() if line.startswith("local kafka:")]
        if kafka and "restarted 1x" in kafka[0] and "UNREACHABLE" not in status.stdout:
            break
        time.sleep(1)
    else:
        raise AssertionError(status.stdout + status.stderr)
    assert "running" in kafka[0]
    log = (state / "stages" / "logs" / "supervisor.log").read_text()
    assert "kafka is not running; restarting in" in log
    assert "kafka restarted" in log

    # the inspector's pipeline view shows the supervised servers and their restarts
    port = re.search(r"http://127\.0\.0\.1:(\d+)/ui", started.stdout)
    assert port is not None, started.stdout
    key = (state / "stages" / "inspector-key").read_text().strip()
    answer = httpx.get(
        f"http://127.0.0.1:{port.group(1)}/v1/inspector/pipeline",
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    shown = {p["name"]: p["state"] for p in answer.json()["result"]["processes"]}
    assert "restarted 1x" in shown["local kafka"]
    assert "restarted" not in shown["local mongo"]
