"""``bench.cores``: P3 runs the servers and the stage on CPUs of their own, then shares them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from bench.cores import CoreSplit, core_split, pin

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two CPUs",
)


def _threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


@pytest.fixture
def server():
    """A stand-in for a server process (threads of its own included)."""
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start()"
    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while len(_threads(child.pid)) < 2:  # its thread runs before anything is pinned
        assert time.monotonic() < deadline, "the stand-in server started no thread"
        time.sleep(0.01)
    mine = os.sched_getaffinity(0)
    yield child.pid
    pin(os.getpid(), mine)  # every thread of this process, whatever the test left
    child.kill()
    child.wait()


def test_the_split_puts_every_thread_of_the_servers_and_of_this_process_apart(server):
    split = core_split({"server": server})
    assert isinstance(split, CoreSplit)
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)  # a thread of this process that exists already
    helper.start()
    try:
        split.apply()
        pinned = {frozenset(os.sched_getaffinity(t)) for t in _threads(os.getpid())}
    finally:
        stop.set()
        helper.join()
    assert set(split.servers_cpus).isdisjoint(split.own_cpus)
    assert {frozenset(os.sched_getaffinity(t)) for t in _threads(server)} == {
        frozenset(split.servers_cpus)
    }
    assert pinned == {frozenset(split.own_cpus)}
    split.share()
    assert os.sched_getaffinity(server) == set(split.all_cpus)
    assert os.sched_getaffinity(0) == set(split.all_cpus)


def test_no_split_without_a_local_server():
    assert core_split({}) is None
