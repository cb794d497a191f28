"""CPU time by thread, from ``/proc`` (Linux): which threads of a process used the CPU.

:mod:`bench.scale_idle` sums an idle pipeline's processes by thread name;
:mod:`bench.windowing` splits a JVM server's CPU in P3's drain into its JIT compiler, its
garbage collector and the rest (its request work).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["process_table", "thread_name", "thread_ticks"]


def process_table() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, utime + stime in clock ticks) of every process."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


def _tree(roots: Sequence[int]) -> list[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in process_table().items():
        children.setdefault(parent, []).append(pid)
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def thread_name(comm: str) -> str:
    """A thread's name with its number dropped (``C2 CompilerThre0`` → ``C2 CompilerThre``,
    ``kafka-request-handler-1`` → ``kafka-request-handler-``): threads of one pool add up."""
    return re.sub(r"[-#]?\d+$", "", comm) or comm


def thread_ticks(
    roots: Sequence[int], *, children: bool = True
) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, tid) → (thread name, utime + stime in ticks) of every thread below ``roots``
    (``children=False``: of ``roots`` only, without a walk of ``/proc``)."""
    out: dict[tuple[int, int], tuple[str, int]] = {}
    for pid in _tree(roots) if children else list(roots):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            out[(pid, int(tid))] = (thread_name(comm), int(fields[11]) + int(fields[12]))
    return out
