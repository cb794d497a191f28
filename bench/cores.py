"""Where a benchmark's processes run: the servers on some CPUs, the measured process on others.

On a small machine the servers and the process under test compete for the
same cores, and a "server alone" row then has the whole machine while the
server never has it in the rows it bounds. :class:`CoreSplit` gives each side
cores of its own, as separate machines would: every thread of the servers'
processes is pinned to the first half of the CPUs this process may use, every
thread of this process to the other half (threads started later inherit
their creator's CPUs). :meth:`CoreSplit.share` undoes it. Linux only
(:func:`os.sched_setaffinity`); :func:`core_split` says ``None`` where it
cannot be done.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["CoreSplit", "core_split", "pin"]


def _threads(pid: int) -> list[int]:
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (a thread that ended meanwhile is passed over)."""
    chosen = set(cpus)
    for thread in _threads(pid):
        try:
            os.sched_setaffinity(thread, chosen)
        except ProcessLookupError:
            continue


class CoreSplit:
    """The servers' processes on :attr:`servers_cpus`, this process on :attr:`own_cpus`."""

    def __init__(self, servers: Mapping[str, int], cpus: list[int]) -> None:
        half = len(cpus) // 2
        self._servers = dict(servers)
        self.all_cpus = list(cpus)
        self.servers_cpus = cpus[:half]
        self.own_cpus = cpus[half:]

    def apply(self) -> None:
        for pid in self._servers.values():
            pin(pid, self.servers_cpus)
        pin(os.getpid(), self.own_cpus)

    def share(self) -> None:
        """Every process back on every CPU."""
        for pid in self._servers.values():
            pin(pid, self.all_cpus)
        pin(os.getpid(), self.all_cpus)

    def describe(self) -> str:
        return (
            f"the servers ({', '.join(self._servers)}) pinned to CPU "
            f"{','.join(map(str, self.servers_cpus))}, the benchmark's process (the stage and "
            f"the bare clients) to CPU {','.join(map(str, self.own_cpus))}"
        )


def core_split(servers: Mapping[str, int]) -> CoreSplit | None:
    """A split of this process's CPUs between ``servers`` and it (``None``: not possible —
    fewer than two CPUs, no local server process, or no CPU affinity on this system)."""
    if not servers or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return CoreSplit(servers, cpus)
