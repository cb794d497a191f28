"""The inspector's pipeline view shows the restarts the supervisor of `mongomem up`
counted, of the local servers and of the stages (issue 25 items 2 and 7), in Chromium.

`up` runs as a real process with its own local servers (Kafka and mongo-java-server,
from the test servers' jars, on free ports, in a temporary state folder). The Kafka
broker and the windowing stage are SIGKILLed; once `mongomem status` counts both
restarts, the inspector that `up` serves shows the same counts.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import goto, headless_chromium, open_inspector, until

from mongomem.local.servers import pid_alive
from mongomem.settings import load_settings
from mongomem.testing.harness import stand_in_llm

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
    import socket

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


def _restarted(pid_file: Path, first: int, log: Path) -> None:
    for _ in range(1800):  # polled every 0.1 s: at most 180 s (a loaded machine)
        again = _pid(pid_file)
        if again is not None and again != first:
            return
        time.sleep(0.1)
    raise AssertionError(f"{pid_file.name} was not restarted; supervisor log:\n{log.read_text()}")


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


def test_the_pipeline_view_shows_server_and_stage_restarts(up_env: dict[str, str]) -> None:
    state = Path(up_env["MONGOMEM_INFRA_STATE_DIR"])
    log = state / "stages" / "logs" / "supervisor.log"
    started = _cli(up_env, "up", "--no-demo")
    assert started.returncode == 0, started.stdout + started.stderr
    kafka, windowing = state / "kafka" / "kafka.pid", state / "stages" / "windowing.pid"
    first_kafka, first_windowing = _pid(kafka), _pid(windowing)
    assert first_kafka is not None
    assert first_windowing is not None
    os.killpg(first_kafka, signal.SIGKILL)
    os.kill(first_windowing, signal.SIGKILL)
    _restarted(kafka, first_kafka, log)
    _restarted(windowing, first_windowing, log)
    for _ in range(120):  # `status` counts both once the restarts are under way
        status = _cli(up_env, "status").stdout
        counted = [line for line in status.splitlines() if "restarted 1x" in line]
        if len(counted) >= 2 and "UNREACHABLE" not in status:
            break
        time.sleep(1)
    else:
        raise AssertionError(status)

    port = re.search(r"http://127\.0\.0\.1:(\d+)/ui", started.stdout)
    assert port is not None, started.stdout
    key = (state / "stages" / "inspector-key").read_text().strip()
    asyncio.run(_pipeline_view_shows_the_restarts(f"http://127.0.0.1:{port.group(1)}", key))


async def _pipeline_view_shows_the_restarts(url: str, key: str) -> None:
    async with headless_chromium() as browser:
        context, page, errors = await open_inspector(browser, url, key)
        await goto(page, "#/pipeline")

        async def shown() -> dict[str, str]:
            rows = await page.locator("#processes tbody tr").all_inner_texts()
            return dict(r.split("\t", 1) for r in rows)

        processes = await until(shown, lambda p: "local kafka" in p and "windowing" in p)
        assert "restarted 1x" in processes["local kafka"], processes
        assert "running" in processes["local kafka"]
        assert "restarted 1x" in processes["windowing"], processes
        assert "restarted" not in processes["local mongo"]
        assert "restarted" not in processes["watcher"]
        assert errors == []
        await context.close()
