"""The scope index after a conflict re-read: a memory a DELETE closed has no current row."""

from __future__ import annotations

from typing import Any

import numpy as np

from mongomem.ltm.documents import encode_embedding
from mongomem.ltm.index import Row, ScopeIndex


def doc(version: int, status: str) -> dict[str, Any]:
    return {
        "_id": f"ver-{version}",
        "memory_id": "mem",
        "version": version,
        "key": "city",
        "text": f"text {version}",
        "status": status,
        "embedding": encode_embedding([1.0, 0.0, 0.0]),
    }


def index_with_current_v2() -> ScopeIndex:
    index = ScopeIndex()
    index.upsert(Row("ver-2", "mem", 2, "city", "text 2"), np.array([1, 0, 0], dtype="f4"))
    return index


def test_a_version_still_marked_current_below_a_delete_is_dropped() -> None:
    """Between a DELETE's insert and its completion the version below is still
    ``current``: planning an UPDATE on it (numbered past the DELETE) would revive a
    deleted memory, so the re-read must not keep it."""
    index = index_with_current_v2()
    index.apply_documents([doc(1, "superseded"), doc(2, "current"), doc(3, "deleted")])
    assert index.keyed("city") is None
    assert len(index) == 0


def test_a_history_version_above_the_current_one_only_raises_its_head() -> None:
    index = index_with_current_v2()
    index.apply_documents([doc(1, "superseded"), doc(2, "current"), doc(3, "superseded")])
    row = index.keyed("city")
    assert row is not None
    assert (row.version, row.head) == (2, 3)
