"""`mongomem infra up` starts whichever local server is missing (SPEC infra).

Both servers run persistent in a temporary state folder on free ports (never
9092/27017); the jars the test session resolved are reused, so nothing is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mongomem.local.infra import Servers
from mongomem.local.servers import free_port, jars_cached, port_in_use
from mongomem.settings import load_settings

pytestmark = pytest.mark.integration


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mongomem.cli", "infra", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _kafka_ports() -> int:
    """A free port whose successor (the controller's) is free too."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and not port_in_use(port + 1):
            return port
    raise RuntimeError("no two free consecutive ports")


@pytest.fixture
def infra_env(tmp_path: Path, servers: Servers) -> Iterator[dict[str, str]]:
    """A state folder of its own, with the jars the test servers resolved (``servers``
    starts them first, so this does not depend on which test ran before)."""
    resolved = load_settings().infra.state_dir.resolve() / "cache"
    if not jars_cached(resolved):
        pytest.skip("the server jars are not resolved here (the test servers resolve them)")
    state = tmp_path / "state"
    assert not jars_cached(state / "cache")
    shutil.copytree(resolved, state / "cache")
    assert jars_cached(state / "cache")
    given = ("MONGOMEM_MONGODB_", "MONGOMEM_KAFKA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(given)}
    env["MONGOMEM_INFRA_STATE_DIR"] = str(state)
    env["MONGOMEM_INFRA_MODE"] = "local"
    env["MONGOMEM_INFRA_MONGO_PORT"] = str(free_port())
    env["MONGOMEM_INFRA_KAFKA_PORT"] = str(_kafka_ports())
    try:
        yield env
    finally:
        _cli(env, "down")


def test_infra_up_starts_a_stopped_kafka_next_to_our_running_mongodb(
    infra_env: dict[str, str],
) -> None:
    first = _cli(infra_env, "up")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "downloads jars" not in first.stdout  # they are cached
    kafka_pid = Path(infra_env["MONGOMEM_INFRA_STATE_DIR"]) / "kafka" / "kafka.pid"
    os.kill(int(kafka_pid.read_text()), 15)
    for _ in range(300):
        status = _cli(infra_env, "status").stdout
        if "kafka: stopped" in status:
            break
    assert "mongo: running" in status, status
    assert "kafka: stopped" in status, status

    again = _cli(infra_env, "up")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already running" in again.stdout  # our MongoDB was kept
    status = _cli(infra_env, "status").stdout
    assert "mongo: running" in status, status
    assert "kafka: running" in status, status
