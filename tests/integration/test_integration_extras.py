"""Each framework integration installed alone (SPEC N3): its extra into a fresh
virtualenv, with nothing else of the optional parts, then that integration's own tests
run there against the test servers, and the other integrations refuse in one line.

The wheel of this checkout is built once; pip's cache serves the packages. Each case
takes minutes (a fresh venv, the extra's install, the tests): on the shared development
machine, under a load average of about 15 on 2 cores, llamaindex took 268 s, langgraph
338 s, openai-agents 430 s, and CrewAI's install alone about seven minutes (chromadb,
lancedb, onnxruntime, …). So by default only the lightest, ``llamaindex``, runs;
``MONGOMEM_TEST_EXTRAS`` names others (``langgraph,openai-agents``, or ``all`` for
every one but CrewAI; ``crewai`` must be named: it cannot share an environment with the
OpenAI Agents SDK either, see pyproject.toml).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from mongomem.local.infra import Servers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

#: extra → (extras installed, test-only packages, its tests). The Agents SDK's test runs
#: the pipeline (`mongomem run all`), which is the `stages` extra.
CASES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "langgraph": ("langgraph", ("langmem>=0.0.30,<0.1",), "test_langgraph_store.py"),
    "openai-agents": ("openai-agents,stages", (), "test_openai_agents_session.py"),
    "llamaindex": ("llamaindex", (), "test_llamaindex_block.py"),
    "crewai": ("crewai", (), "test_crewai_storage.py"),
}

MODULES = {
    "langgraph": "langgraph",
    "openai-agents": "openai_agents",
    "llamaindex": "llamaindex",
    "crewai": "crewai",
}
DEFAULT = "llamaindex"


def _chosen() -> set[str]:
    named = os.environ.get("MONGOMEM_TEST_EXTRAS", DEFAULT)
    if named.strip() == "all":
        return set(CASES) - {"crewai"}
    return {n.strip() for n in named.split(",") if n.strip()}


def _run(
    *command: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOMEM_", "PYTHON"))}
    return subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=ROOT,
        check=False,
        timeout=900,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("extras-dist")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("mongomem_ltm-*.whl")
    return found


@pytest.mark.parametrize("extra", sorted(CASES))
def test_an_integration_works_with_its_extra_alone(
    extra: str, wheel: Path, servers: Servers, tmp_path: Path
) -> None:
    if extra not in _chosen():
        pytest.skip(f"{extra} takes minutes: MONGOMEM_TEST_EXTRAS={extra} runs it")
    extras, test_deps, tests = CASES[extra]
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = _run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        f"{wheel}[{extras}]",
        "pytest",
        "pytest-asyncio",
        *test_deps,
    )
    assert installed.returncode == 0, installed.stderr

    for other, module in MODULES.items():
        if other == extra:
            continue
        refused = _run(python, "-c", f"import mongomem.integrations.{module}")
        assert refused.returncode == 1
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("mongomem.errors.MissingExtra: ")
        assert last.endswith(f"pip install 'mongomem-ltm[{other}]'"), last

    ran = _run(
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"tests/integration/{tests}",
        env={
            "MONGOMEM_MONGODB_URI": servers.mongodb_uri,
            "MONGOMEM_KAFKA_BOOTSTRAP": servers.kafka_bootstrap,
        },
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout
    assert "skipped" not in ran.stdout
