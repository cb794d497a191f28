"""bench.windowing splits a JVM server's CPU in P3's drain into its JIT compilers, its
collector and the rest (its requests), by thread name from /proc."""

from __future__ import annotations

import os
import subprocess

import pytest

import bench.windowing as windowing
from bench.threads import thread_name, thread_ticks


def test_thread_names_drop_their_numbers_so_a_pool_adds_up():
    assert thread_name("C2 CompilerThre0") == "C2 CompilerThre"
    assert thread_name("GC Thread#1") == "GC Thread"
    assert thread_name("G1 Conc#0") == "G1 Conc"
    assert thread_name("mongo-server-worker-12") == "mongo-server-worker"


def test_a_process_alone_or_with_the_processes_below_it():
    child = subprocess.Popen(["sleep", "30"])
    try:
        alone = thread_ticks([os.getpid()], children=False)
        tree = thread_ticks([os.getpid()])
    finally:
        child.kill()
        child.wait()
    assert {pid for pid, _ in alone} == {os.getpid()}
    assert {os.getpid(), child.pid} <= {pid for pid, _ in tree}


def test_compiler_and_collector_threads_are_counted_apart_from_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    threads = {
        (7, 1): ("C2 CompilerThre", 3 * hz),
        (7, 2): ("C1 CompilerThre", 1 * hz),
        (7, 3): ("GC Thread", 2 * hz),
        (7, 4): ("G1 Conc", 1 * hz),
        (7, 5): ("mongo-server-worker", 9 * hz),  # requests: neither
    }
    monkeypatch.setattr(windowing, "thread_ticks", lambda roots, children=True: threads)
    assert windowing.housekeeping_seconds({"mongo": 7}) == {"mongo JIT": 4.0, "mongo GC": 3.0}


def test_the_report_gives_each_part_and_what_mongodb_alone_used():
    text = windowing.housekeeping_text(
        {"stage": 0.5, "mongo": 0.47, "kafka": 0.1},
        {"mongo JIT": 0.1, "mongo GC": 0.12, "kafka JIT": 0.01, "kafka GC": 0.02},
        {"stage": 0.08, "mongo": 0.35, "mongo JIT": 0.01, "mongo GC": 0.04},
    )
    assert "mongo-java-server 0.47 s: its JIT compilers 0.10 s, its collector 0.12 s" in text
    assert "the rest (its requests) 0.25 s (MongoDB alone, for the same upserts: 0.35 s, " in text
    assert "0.01 s, 0.04 s, 0.30 s)" in text
    assert "the broker 0.10 s: its JIT compilers 0.01 s, its collector 0.02 s, the rest" in text
    assert windowing.housekeeping_text({"stage": 0.5}, {}, {}) == ""
