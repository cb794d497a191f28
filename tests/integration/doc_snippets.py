"""The code blocks of README.md and docs/, and how a newcomer runs them.

Every ```` ```python ```` block of ``README.md`` and ``docs/**/*.md`` is a
:class:`Snippet`. :func:`run_snippet` runs one as a reader does after ``make run``:
as its own ``python`` process, from a folder of their own, in a shell with no
``MONGOMEM_*`` variable (the SDK finds the servers through the file ``mongomem up``
leaves, ``.mongomem/stages/env.json``, written by :func:`local_pipeline`), with a
folder named ``pipeline/`` of their own beside it that must shadow nothing.

A snippet that reads the settings itself (``load_settings()``) runs after the exports
the docs tell the reader to make first, ``eval "$(mongomem env)"``. A snippet may
need a server the docs tell the reader to start
(:data:`HTTP_SERVICE`: ``mongomem serve`` on 127.0.0.1:8080 with a key ``KEY``);
the test starts it and points the snippet at it. :data:`CHECKS` adds, for the
snippets it knows, lines that check what the snippet did (run after it, in the
same process, never shown to the reader). A snippet that needs an extra outside
``all`` (:data:`EXTRAS`, so not in the dev install) is skipped, with the reason, where
that extra is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mongomem.settings import LOCAL_PIPELINE_ENV, Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"

#: What the docs tell a reader to start before an HTTP snippet (a key of their own as KEY).
HTTP_SERVICE = 'base_url="http://127.0.0.1:8080"'
#: How long one snippet may run (a reader's patience, on a busy machine).
SNIPPET_TIMEOUT_S = 180
#: What a snippet that reads the settings itself calls: it runs after ``mongomem env``'s exports.
EXPORTED = "load_settings()"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Snippet:
    """One ```` ```python ```` block: where it is and its code."""

    path: Path
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def needs_service(self) -> bool:
        return HTTP_SERVICE in self.code

    @property
    def needs_exports(self) -> bool:
        """It reads the settings itself (``load_settings()``), so the docs tell the reader
        to export them first: ``eval "$(mongomem env)"``."""
        return EXPORTED in self.code


def snippets(path: Path) -> list[Snippet]:
    """The python blocks of one Markdown file, in order."""
    text = path.read_text()
    return [
        Snippet(path, text.count("\n", 0, match.start()) + 1, match.group(1))
        for match in _FENCE.finditer(text)
    ]


def documents() -> list[Path]:
    """README.md, then every page of docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def all_snippets() -> list[Snippet]:
    return [snippet for path in documents() for snippet in snippets(path)]


#: Checks run after a snippet, in its process: marker in the snippet → lines appended.
CHECKS: dict[str, str] = {
    # the agent snippets (README, the SDK guide): memory reaches the prompt's context
    'context = chat.build_context("plan my next flight")': (
        'assert "home airport" in context.text.lower(), context.text'
    ),
    # getting started, erasure: the turn recorded first is gone
    "Please forget me after this.": (
        'assert result.erased, result\nassert result.removed.get("turns") == 1, result.removed'
    ),
    # lifecycle: deleted with its reason, browsed, and nothing pending
    "chat.delete_memory(": (
        'assert done.reason == "the user asked"\n'
        'assert [i.key for i in page.items] == ["seat"]\n'
        'assert status.state == "done"'
    ),
    # export: one version out, one memory in, and the file as the format says
    "memory.export_user(": (
        "assert (exported.versions, imported.memories) == (1, 1)\n"
        "import pathlib\n"
        'assert pathlib.Path("user_1.jsonl").read_text().count("\\n") == 4'
    ),
    # time and speakers: the value as of a time, the dated context, speakers, subjects
    "chat.value_as_of(": (
        'assert then.text == "The user prefers aisle seats.", then\n'
        'assert [h.memory.text for h in old] == ["The user prefers aisle seats."], old\n'
        'assert "aisle seats. (said " in context.text, context.text\n'
        "assert nothing_yet == [], nothing_yet\n"
        'assert [t.speaker for t in chat.recent_turns(10)][:2] == ["Melanie", "Caroline"]\n'
        'assert chat.search_semantic("seat", subject="Melanie") == []'
    ),
    # over HTTP: the save is there, read back through the service
    HTTP_SERVICE: 'assert "Boston" in chat.get_semantic("home-airport").text',
    # recall: the rare name is found by BM25 first; the turn hit with its neighbour;
    # the best turn in the context under its own heading
    'chat.search_semantic("Pixel")': (
        'assert best.memory.label == "pet", best\nassert best.ranks.lexical_rank == 1, best.ranks'
    ),
    "talk.search_turns(": (
        'assert hit.turn.content == "We booked the kiln workshop in Lisbon.", hit\n'
        'assert [t.content for t in hit.neighbours] == ["Lovely! When is it?"], hit.neighbours'
    ),
    # time-aware recall: "two weeks ago" from as_of picks the first Monday's session
    'now.search_turns("the weather two weeks ago"': (
        'assert (hit.session_id, hit.ranks.time_rank) == ("week_0", 1), hit'
    ),
    # build_context without as_of: "two weeks ago" from now picks the older session's turn
    'asking.build_context("the Rota Vicentina hike two weeks ago"': (
        'assert context.items[-1].memory_type == "turn", context.items\n'
        'assert context.items[-1].text == "We walked a stretch of the Vicentina route.", '
        "context.items\n"
        'assert "session hike_old" in context.items[-1].key, context.items'
    ),
    "include_turns=2": (
        'assert "## From the conversation" in context.text, context.text\n'
        'assert "We booked the kiln workshop in Lisbon." in context.text, context.text'
    ),
}

#: Snippets whose printed lines tell their story: marker → (first lines, last lines).
PRINTS: dict[str, tuple[list[str], list[str]]] = {
    # memory spaces: a conflict to choose, merged, recalled; then the applied feedback
    "from mongomem.spaces import": (["needs-choice 1", "merged"], ["apply approve", "2 lines"]),
    # getting started: the save read back by key and by meaning (then the context)
    'label="seat-preference"': (["The user prefers aisle seats."] * 2, []),
}


#: Snippets that need an extra outside ``all``: marker → (module, extra). Where the module
#: is not importable the snippet is skipped, saying which extra it needs.
EXTRAS: dict[str, tuple[str, str]] = {
    # CrewAI's storage: crewai needs openai<3, which the openai-agents extra cannot share
    "from crewai import": ("crewai", "crewai"),
}


def missing_extra(snippet: Snippet) -> str | None:
    """Why ``snippet`` cannot run here (an extra it needs is not installed), else None."""
    for marker, (module, extra) in EXTRAS.items():
        if marker in snippet.code and importlib.util.find_spec(module) is None:
            return (
                f"{snippet.name} needs {module}: pip install 'mongomem-ltm[{extra}]' "
                "(not in the `all` extra)"
            )
    return None


def checks_for(snippet: Snippet) -> str:
    return "\n".join(check for marker, check in CHECKS.items() if marker in snippet.code)


def fresh_env(**extra: str) -> dict[str, str]:
    """A newcomer's shell: the machine's variables, none of mongomem's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}
    return {**env, **extra}


def local_pipeline(settings: Settings, folder: Path, **extra: str) -> None:
    """The file ``mongomem up`` leaves behind, pointing at the test servers."""
    saved = folder / ".mongomem" / LOCAL_PIPELINE_ENV
    saved.parent.mkdir(parents=True, exist_ok=True)
    values = {
        "MONGOMEM_MONGODB_URI": settings.mongodb.uri or "",
        "MONGOMEM_MONGODB_DATABASE": settings.mongodb.database,
        "MONGOMEM_KAFKA_BOOTSTRAP": settings.kafka.bootstrap or "",
        **extra,
    }
    saved.write_text(json.dumps(values))


def _saved_env(folder: Path) -> dict[str, str]:
    """What ``eval "$(mongomem env)"`` exports in ``folder``: the saved stage settings."""
    saved = json.loads((folder / ".mongomem" / LOCAL_PIPELINE_ENV).read_text())
    return {str(k): str(v) for k, v in saved.items()}


def reader_folder(settings: Settings, folder: Path) -> Path:
    """A reader's folder after ``make run``, with a ``pipeline/`` of their own in it."""
    # `make run` saves the provider it chose; the hashing stand-in keeps the tests fast.
    local_pipeline(settings, folder, MONGOMEM_EMBEDDING_PROVIDER="stand-in")
    own = folder / "pipeline"
    own.mkdir(exist_ok=True)
    (own / "__init__.py").write_text("raise ImportError('the user folder')\n")
    return folder


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str

    @property
    def warnings(self) -> list[str]:
        """What stderr says besides the stand-in's own label."""
        return [line for line in self.stderr.splitlines() if "STAND-IN" not in line]


async def run_snippet(
    snippet: Snippet,
    folder: Path,
    *,
    service_url: str | None = None,
    key: str | None = None,
) -> Ran:
    """Run ``snippet`` (and its checks) as its own process from ``folder``."""
    code = snippet.code
    if snippet.needs_service:
        if service_url is None or key is None:
            raise AssertionError(f"{snippet.name} needs the HTTP service and a key")
        code = f"KEY = {key!r}\n" + code.replace("http://127.0.0.1:8080", service_url)
    code = code + "\n" + checks_for(snippet) + "\n"
    exports = _saved_env(folder) if snippet.needs_exports else {}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=folder,
        env=fresh_env(**exports),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), SNIPPET_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())
