"""Parallel starts (pytest-xdist workers, two ``mongomem up``) resolve the jars once.

The first process to find the cache empty resolves under the cache folder's lock;
the others wait for it and then find the class path it wrote.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mongomem.local import servers


def test_concurrent_first_starts_resolve_the_jars_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[str] = []
    written: dict[str, str] = {}

    def cached(profile: str, cache_dir: Path) -> str | None:
        return written.get(profile)

    def resolve(profile: str, cache_dir: Path) -> str:
        resolved.append(profile)
        time.sleep(0.3)  # Maven at work: the other starts arrive meanwhile
        written[profile] = f"/jars/{profile}.jar"
        return written[profile]

    monkeypatch.setattr(servers, "_cached_classpath", cached)
    monkeypatch.setattr(servers, "_resolve_classpath", resolve)
    results: list[str] = []
    starts = [
        threading.Thread(
            target=lambda: results.append(servers.resolve_classpath("kafka", tmp_path))
        )
        for _ in range(3)
    ]
    for start in starts:
        start.start()
    for start in starts:
        start.join(timeout=10)
    assert results == ["/jars/kafka.jar"] * 3
    assert resolved == ["kafka"]  # without the lock, each start ran Maven
