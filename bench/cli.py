"""How long a ``mongomem`` command that only reads takes, from a new shell (issue 25).

Each command runs as a fresh process (``python -m mongomem.cli …``) in a folder
where a local pipeline saved its settings (``.mongomem/stages/env.json``,
pointing at servers this benchmark starts on free ports), with no
``MONGOMEM_*`` variables — as a user runs it after ``make run``. Every command
is timed ``--repeat`` times, interleaved with the baselines, and the median is
reported next to the same run's ``python -c pass``, ``python -c "import
mongomem"`` and ``python -c "import mongomem.settings, pymongo"`` (what any
command that reads MongoDB must import: the floor), so a loaded machine shows as
a higher baseline rather than as a slower command. The target: a reading call
costs at most 1.5 s on the machine.

Where the time goes: each command is also run in this process, its imports
already loaded (``in-process s``: the round trips to the servers and the work),
and its imports are timed alone in a fresh interpreter (``imports s``, ``python
-X importtime``'s total for the modules the command loads).

    python -m bench.cli [--repeat N]     → bench/results/cli.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mongomem.local.infra import start_servers
from mongomem.settings import LOCAL_PIPELINE_ENV, load_settings

RESULTS = Path(__file__).parent / "results" / "cli.md"

BASELINES: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    'python -c "import mongomem"': [sys.executable, "-c", "import mongomem"],
    # the floor of a command that reads MongoDB: the settings' and the driver's imports
    'python -c "import mongomem.settings, pymongo"': [
        sys.executable,
        "-c",
        "import mongomem.settings, pymongo",
    ],
}

COMMANDS: list[list[str]] = [
    ["--help"],
    ["env"],
    ["keys", "list"],
    ["memory", "list", "--project-id", "bench", "--user-id", "u1"],
    ["memory", "sessions", "--project-id", "bench", "--user-id", "u1"],
    ["memory", "status", "--project-id", "bench", "--user-id", "u1", "--session-id", "s1"],
    ["export", "--project-id", "bench", "--user-id", "u1"],
    ["spaces", "list", "--project-id", "bench"],
    ["dlq", "list"],
    ["status"],
]


#: One turn, so that the session the reads ask about exists.
TURN = """
from mongomem import Memory, MemoryRequestContext
with Memory(project_id="bench") as memory:
    chat = memory.bind(MemoryRequestContext(user_id="u1", session_id="s1"))
    chat.record_turn("user", "My home airport is Boston.")
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")}


def _time(argv: list[str], cwd: Path) -> tuple[float, int]:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, check=False)
    return time.perf_counter() - began, done.returncode


def _in_process(command: list[str], cwd: Path) -> float:
    """One call of the command in this process (imports loaded by a first, untimed call)."""
    import contextlib
    import io

    from mongomem.cli.main import main as cli_main

    here = Path.cwd()
    os.chdir(cwd)
    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("MONGOMEM_")]}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(SystemExit):
                cli_main(command)
            began = time.perf_counter()
            with contextlib.suppress(SystemExit):
                cli_main(command)
            return time.perf_counter() - began
    finally:
        os.environ.update(saved)
        os.chdir(here)


def _imports(command: list[str], cwd: Path) -> tuple[float, bool]:
    """Seconds of ``import`` the command costs in a fresh interpreter (``-X importtime``),
    and whether numpy was among them."""
    argv = [sys.executable, "-X", "importtime", "-m", "mongomem.cli", *command]
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    total = 0
    numpy = False
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[0].split(":")[1].strip():
            with_self = parts[0].split(":")[1].strip()
            if with_self.isdigit():
                total += int(with_self)
            numpy = numpy or parts[2].strip() == "numpy"
    return total / 1e6, numpy


def _load() -> str:
    """The machine's 1-minute load average and core count, as the header states them."""
    return f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command")
    args = parser.parse_args()
    load_before = _load()
    servers = start_servers(load_settings(), for_tests=True)
    try:
        with tempfile.TemporaryDirectory() as folder:
            cwd = Path(folder)
            saved = cwd / ".mongomem" / LOCAL_PIPELINE_ENV
            saved.parent.mkdir(parents=True)
            saved.write_text(
                json.dumps(
                    {
                        "MONGOMEM_MONGODB_URI": servers.mongodb_uri,
                        "MONGOMEM_KAFKA_BOOTSTRAP": servers.kafka_bootstrap,
                        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
                    }
                )
            )
            cli = [sys.executable, "-m", "mongomem.cli"]
            subprocess.run([sys.executable, "-c", TURN], cwd=cwd, env=_env(), check=True)
            # one untimed run each: bytecode compiled, the servers' first-use costs paid
            for argv in [*BASELINES.values(), *([*cli, *c] for c in COMMANDS)]:
                _time(argv, cwd)
            times: dict[str, list[float]] = {}
            codes: dict[str, int] = {}
            inside = {"mongomem " + " ".join(c): _in_process(c, cwd) for c in COMMANDS}
            imports = {"mongomem " + " ".join(c): _imports(c, cwd) for c in COMMANDS}
            for _ in range(args.repeat):
                for name, argv in BASELINES.items():
                    times.setdefault(name, []).append(_time(argv, cwd)[0])
                for command in COMMANDS:
                    name = "mongomem " + " ".join(command)
                    took, code = _time([*cli, *command], cwd)
                    times.setdefault(name, []).append(took)
                    codes[name] = code
        load_after = _load()
    finally:
        servers.stop()
    base = statistics.median(times["python -c pass"])
    lines = [
        "# CLI: seconds per call from a new shell",
        "",
        f"`python -m bench.cli --repeat {args.repeat}` — median of {args.repeat} runs each, "
        "interleaved; each command a fresh process in a folder with a local pipeline's saved "
        "settings, against mongo-java-server and Kafka on this machine. Load average during "
        f"this run: {load_before} before it, {load_after} at its end. The machine is shared "
        "(other engineers' builds and tests may run at once): compare a row with the same "
        "run's baselines, not with another run. `numpy`: whether the command imported it.",
        "",
        "| call | median s | min s | × `python -c pass` | in-process s | imports s | numpy "
        "| exit |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        code = codes.get(name, 0)
        ran = f"{inside[name]:.2f}" if name in inside else ""
        loaded = f"{imports[name][0]:.2f}" if name in imports else ""
        numpy = ("yes" if imports[name][1] else "no") if name in imports else ""
        lines.append(
            f"| `{name}` | {median:.2f} | {min(values):.2f} | {median / base:.1f} | {ran} "
            f"| {loaded} | {numpy} | {code} |"
        )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
