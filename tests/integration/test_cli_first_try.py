"""Every command works the first time, from a new shell (SPEC I7, issue 25).

Each command runs as a newcomer runs it: a fresh process, no ``MONGOMEM_*``
variables, in the folder where the local pipeline saved its settings
(``.mongomem/stages/env.json``, what ``mongomem up`` writes). Then the same
commands with bad settings: each failure is one line that names the variable
and the fix, and an unreachable server is named by its address within the
server-selection timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mongomem.settings import LOCAL_PIPELINE_ENV, Settings

pytestmark = pytest.mark.integration


def fresh_env(**extra: str) -> dict[str, str]:
    """A newcomer's shell: the machine's variables, none of mongomem's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    return {**env, **extra}


def cli(
    *args: str, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mongomem.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def local_pipeline(settings: Settings, folder: Path, **extra: str) -> None:
    """The file ``mongomem up`` leaves behind, pointing at the test servers."""
    saved = folder / ".mongomem" / LOCAL_PIPELINE_ENV
    saved.parent.mkdir(parents=True, exist_ok=True)
    values = {
        "MONGOMEM_MONGODB_URI": settings.mongodb.uri or "",
        "MONGOMEM_MONGODB_DATABASE": settings.mongodb.database,
        "MONGOMEM_KAFKA_BOOTSTRAP": settings.kafka.bootstrap or "",
        "MONGOMEM_KAFKA_TOPIC_PREFIX": settings.kafka.topic_prefix,
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        **extra,
    }
    saved.write_text(json.dumps(values))


#: Commands that read (or write harmlessly) and must succeed on the saved settings alone.
WORKING: list[tuple[str, ...]] = [
    ("keys", "list"),
    ("memory", "list", "--project-id", "first", "--user-id", "u1"),
    ("memory", "count", "--project-id", "first", "--user-id", "u1"),
    ("memory", "sessions", "--project-id", "first", "--user-id", "u1"),
    ("memory", "turns", "--project-id", "first", "--user-id", "u1", "--session-id", "s1"),
    ("export", "--project-id", "first", "--user-id", "u1"),
    ("spaces", "list", "--project-id", "first"),
    ("expire",),
    ("erase", "user", "--project-id", "first-erase", "--user-id", "u9", "--yes"),
    ("erase", "resume"),
    ("dlq", "list"),
]


@pytest.mark.parametrize("command", WORKING, ids=lambda c: " ".join(c[:2]))
def test_each_command_finds_the_local_pipeline(
    settings: Settings, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """They stopped with ``no MongoDB URI``: only status, dlq and env read the saved file."""
    local_pipeline(settings, tmp_path)
    done = cli(*command, cwd=tmp_path, env=fresh_env())
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_import_of_an_export_from_a_new_shell(settings: Settings, tmp_path: Path) -> None:
    local_pipeline(settings, tmp_path)
    exported = cli(
        "export", "--project-id", "first", "--user-id", "u1", cwd=tmp_path, env=fresh_env()
    )
    assert exported.returncode == 0, exported.stderr
    done = cli(
        "import",
        "-",
        "--project-id",
        "first",
        "--user-id",
        "u2",
        cwd=tmp_path,
        env=fresh_env(),
        stdin=exported.stdout,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["versions"] == 0


def test_keys_create_then_list_with_the_one_spelling_and_the_old_one(
    settings: Settings, tmp_path: Path
) -> None:
    local_pipeline(settings, tmp_path)
    env = fresh_env()
    made = cli("keys", "create", "--project-id", "first", "--name", "n", cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    old = cli("keys", "create", "first-old", cwd=tmp_path, env=env)  # the older spelling
    assert old.returncode == 0, old.stderr
    listed = cli("keys", "list", "--project", "first", cwd=tmp_path, env=env)  # hidden alias
    assert listed.returncode == 0, listed.stderr
    assert "first " in listed.stdout
    assert "first-old" not in listed.stdout


#: Commands that need MongoDB, checked with bad settings.
NEEDS_MONGODB: list[tuple[str, ...]] = [
    ("keys", "list"),
    ("memory", "list", "--project-id", "p", "--user-id", "u"),
    ("export", "--project-id", "p", "--user-id", "u"),
    ("spaces", "list", "--project-id", "p"),
    ("expire",),
    ("erase", "resume"),
]


@pytest.mark.parametrize("command", NEEDS_MONGODB, ids=lambda c: " ".join(c[:2]))
def test_without_settings_one_line_names_the_variable_and_the_fix(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    done = cli(*command, cwd=tmp_path, env=fresh_env())
    assert done.returncode == 1
    assert done.stdout == ""  # no "nothing to do", no table header
    (line,) = done.stderr.splitlines()
    assert "MONGOMEM_MONGODB_URI" in line
    assert 'eval "$(mongomem env)"' in line


@pytest.mark.parametrize("command", [("keys", "list"), ("status",)], ids=" ".join)
def test_a_mistyped_uri_scheme_is_one_line_naming_the_variable(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """It was a 31-line traceback from `status` and `keys list`."""
    done = cli(*command, cwd=tmp_path, env=fresh_env(MONGOMEM_MONGODB_URI="mongdb://h:1/"))
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "MONGOMEM_MONGODB_URI" in line
    assert "mongdb://" in line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", NEEDS_MONGODB[:3], ids=lambda c: " ".join(c[:2]))
# pymongo's async monitor may leave the socket of a refused connect to the collector
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unreachable_server_is_one_line_naming_its_address_in_time(
    tmp_path: Path,
    command: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It was one line of ~600 characters of driver topology, after 10–17 s: every step
    of the set-up waited out its own server-selection timeout."""
    from mongomem.cli.main import main

    port = _free_port()
    timeout = 3.0
    for name in [n for n in os.environ if n.startswith("MONGOMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", f"mongodb://127.0.0.1:{port}/?directConnection=true")
    monkeypatch.setenv("MONGOMEM_MONGODB_SERVER_SELECTION_TIMEOUT_S", str(timeout))
    monkeypatch.chdir(tmp_path)
    assert main(list(command)) == 1  # in this process: the imports are loaded once, untimed
    capsys.readouterr()
    began = time.monotonic()
    assert main(list(command)) == 1
    took = time.monotonic() - began
    (line,) = capsys.readouterr().err.splitlines()
    assert f"127.0.0.1:{port}" in line
    assert "MONGOMEM_MONGODB_URI" in line
    assert len(line) < 200, line  # not the driver's topology description
    assert took < 2 * timeout, took  # one timeout, not one per set-up step


def test_a_retired_variable_is_reported_once_with_its_replacement(tmp_path: Path) -> None:
    """``MONGOMEM_WINDOW_TICK_INTERVAL_S`` was silently ignored."""
    env = fresh_env(MONGOMEM_WINDOW_TICK_INTERVAL_S="1", MONGOMEM_MONGODB_URIS="x")
    done = cli("keys", "list", cwd=tmp_path, env=env)
    lines = done.stderr.splitlines()
    retired = [line for line in lines if "MONGOMEM_WINDOW_TICK_INTERVAL_S" in line]
    assert len(retired) == 1
    assert "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S" in retired[0]
    typo = [line for line in lines if "MONGOMEM_MONGODB_URIS" in line]
    assert len(typo) == 1
    assert "did you mean MONGOMEM_MONGODB_URI?" in typo[0]


def test_an_unreachable_broker_is_one_line_naming_its_address(tmp_path: Path) -> None:
    """`dlq list` printed aiokafka's own ``Unable connect to …`` lines before its error."""
    down = f"127.0.0.1:{_free_port()}"
    done = cli("dlq", "list", cwd=tmp_path, env=fresh_env(MONGOMEM_KAFKA_BOOTSTRAP=down))
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert down in line
    assert "MONGOMEM_KAFKA_BOOTSTRAP" in line


def test_status_with_both_servers_down_is_short_lines_and_every_section(tmp_path: Path) -> None:
    """It printed the driver's topology (~600 characters) and stopped at the Kafka section."""
    mongo, kafka = _free_port(), _free_port()
    env = fresh_env(
        MONGOMEM_MONGODB_URI=f"mongodb://127.0.0.1:{mongo}/?directConnection=true",
        MONGOMEM_MONGODB_SERVER_SELECTION_TIMEOUT_S="1",
        MONGOMEM_KAFKA_BOOTSTRAP=f"127.0.0.1:{kafka}",
    )
    done = cli("status", cwd=tmp_path, env=env)
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) < 400 for line in lines), lines
    usage = [line for line in lines if line.startswith("LLM usage")]
    assert len(usage) == 1
    assert f"MongoDB at 127.0.0.1:{mongo} did not answer" in usage[0]
    assert len([line for line in lines if f"UNREACHABLE at 127.0.0.1:{kafka}" in line]) == 1
