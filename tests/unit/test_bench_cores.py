"""``bench.cores``: P3 runs the servers and the stage on CPUs of their own, then shares them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.cores import CoreSplit, core_split

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two CPUs",
)


@pytest.fixture
def server():
    """A stand-in for a server process (threads of its own included)."""
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start()"
    child = subprocess.Popen([sys.executable, "-c", code])
    mine = os.sched_getaffinity(0)
    yield child.pid
    os.sched_setaffinity(0, mine)
    child.kill()
    child.wait()


def _threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def test_the_split_puts_every_thread_of_the_servers_and_of_this_process_apart(server):
    split = core_split({"server": server})
    assert isinstance(split, CoreSplit)
    split.apply()
    assert set(split.servers_cpus).isdisjoint(split.own_cpus)
    assert {frozenset(os.sched_getaffinity(t)) for t in _threads(server)} == {
        frozenset(split.servers_cpus)
    }
    assert {frozenset(os.sched_getaffinity(t)) for t in _threads(os.getpid())} == {
        frozenset(split.own_cpus)
    }
    split.share()
    assert os.sched_getaffinity(server) == set(split.all_cpus)
    assert os.sched_getaffinity(0) == set(split.all_cpus)


def test_no_split_without_a_local_server():
    assert core_split({}) is None
