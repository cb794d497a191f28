"""Each framework integration installed alone (SPEC N3): its extra into a fresh
virtualenv, with nothing else of the optional parts, then that integration's own tests
run there against the test servers, and the other integrations refuse in one line.

``make test-extras`` runs every case (CI runs it after the suite). The wheel of this
checkout is built once; each virtualenv installs ``mongomem-ltm[<extra>]`` from it with
its dependencies from the package index (pip's cache serves what it holds). The four
installs run at once (they mostly wait on the network), then each case's tests run in
turn. A case takes minutes, so in ``make test`` they are skipped unless
``MONGOMEM_TEST_EXTRAS`` names them (``langgraph,crewai``, or ``all``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from mongomem.local.infra import Servers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

GUIDE = "test_integrations_guide.py::test_the_{}_example_runs"

#: extra → (extras installed, test-only packages, its tests: its own, and its example in
#: docs/guides/integrations.md). The Agents SDK's test runs the pipeline (`mongomem run
#: all`), which is the `stages` extra.
CASES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "langgraph": (
        "langgraph",
        ("langmem>=0.0.30,<0.1",),
        ("test_langgraph_store.py", "test_langgraph_custom_types.py", GUIDE.format("langgraph")),
    ),
    "openai-agents": (
        "openai-agents,stages",
        (),
        ("test_openai_agents_session.py", GUIDE.format("openai_agents")),
    ),
    "llamaindex": ("llamaindex", (), ("test_llamaindex_block.py", GUIDE.format("llamaindex"))),
    "crewai": (
        "crewai",
        (),
        ("test_crewai_storage.py", "test_crewai_crew.py", GUIDE.format("crewai")),
    ),
}

MODULES = {
    "langgraph": "langgraph",
    "openai-agents": "openai_agents",
    "llamaindex": "llamaindex",
    "crewai": "crewai",
}

#: An install from an empty pip cache downloads hundreds of MB (CrewAI's alone brings
#: chromadb, lancedb, onnxruntime, …): generous bounds, so a slow index fails loudly
#: rather than hangs, not a timing check.
INSTALL_TIMEOUT_S = 1800
TESTS_TIMEOUT_S = 1200


def chosen() -> set[str]:
    """The extras ``MONGOMEM_TEST_EXTRAS`` names (``all``: every one); none unset."""
    named = os.environ.get("MONGOMEM_TEST_EXTRAS", "")
    if named.strip() == "all":
        return set(CASES)
    wanted = {n.strip() for n in named.split(",") if n.strip()}
    unknown = wanted - set(CASES)
    if unknown:
        raise ValueError(f"MONGOMEM_TEST_EXTRAS names no integration: {sorted(unknown)}")
    return wanted


def _run(
    *command: str | Path, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOMEM_", "PYTHON"))}
    return subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=ROOT,
        check=False,
        timeout=timeout,
    )


@dataclass(frozen=True)
class Installed:
    """A fresh virtualenv with one extra: its interpreter, pip's answer, how long."""

    python: Path
    pip: subprocess.CompletedProcess[str]
    seconds: float


def install(extra: str, wheel: Path, where: Path) -> Installed:
    """A new virtualenv at ``where`` with ``mongomem-ltm[<extra>]`` and pytest."""
    started = time.monotonic()
    extras, test_deps, _ = CASES[extra]
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    pip = _run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        f"{wheel}[{extras}]",
        "pytest",
        "pytest-asyncio",
        *test_deps,
        timeout=INSTALL_TIMEOUT_S,
    )
    return Installed(python, pip, time.monotonic() - started)


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Installed]]]:
    """One wheel of this checkout; a virtualenv per chosen extra, all installing at once."""
    wanted = sorted(chosen())
    if not wanted:
        yield {}
        return
    dist = tmp_path_factory.mktemp("extras-dist")
    built = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT, timeout=600
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("mongomem_ltm-*.whl")
    with ThreadPoolExecutor(max_workers=len(wanted), thread_name_prefix="extra-venv") as pool:
        yield {
            extra: pool.submit(install, extra, wheel, tmp_path_factory.mktemp(f"venv-{extra}"))
            for extra in wanted
        }


@pytest.mark.parametrize("extra", sorted(CASES))
def test_an_integration_works_with_its_extra_alone(
    extra: str, installs: dict[str, Future[Installed]], servers: Servers
) -> None:
    if extra not in installs:
        pytest.skip(f"{extra} takes minutes: `make test-extras` runs every integration alone")
    done = installs[extra].result()
    assert done.pip.returncode == 0, done.pip.stderr[-4000:]

    for other, module in MODULES.items():
        if other == extra:
            continue
        refused = _run(done.python, "-c", f"import mongomem.integrations.{module}", timeout=120)
        assert refused.returncode == 1
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("mongomem.errors.MissingExtra: ")
        assert last.endswith(f"pip install 'mongomem-ltm[{other}]'"), last

    started = time.monotonic()
    ran = _run(
        done.python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *(f"tests/integration/{name}" for name in CASES[extra][2]),
        timeout=TESTS_TIMEOUT_S,
        env={
            "MONGOMEM_MONGODB_URI": servers.mongodb_uri,
            "MONGOMEM_KAFKA_BOOTSTRAP": servers.kafka_bootstrap,
        },
    )
    took = time.monotonic() - started
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else "no output"
    print(f"[{extra}] venv and install {done.seconds:.0f} s, tests {took:.0f} s ({summary})")
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout
    assert "skipped" not in ran.stdout


def test_a_name_that_is_no_integration_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOMEM_TEST_EXTRAS", "langgraph, crew")
    with pytest.raises(ValueError, match="crew"):
        chosen()
    monkeypatch.setenv("MONGOMEM_TEST_EXTRAS", "all")
    assert chosen() == set(CASES) == set(MODULES)
