"""Long-term memory building blocks without servers: kinds, documents, the scope index,
identity and the public API of ``mongomem.ltm`` and ``mongomem.sdk``."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime

import numpy as np
import pytest

from mongomem.errors import InputError, ScopeError
from mongomem.ltm.documents import from_document, to_document
from mongomem.ltm.index import Row, ScopeIndex
from mongomem.ltm.kinds import KINDS, kind_of, normalize_key, scope_for
from mongomem.ltm.plan import Decision, build_version
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryScope
from mongomem.sdk import MemoryRequestContext, resolve_identity

AT = datetime(2026, 1, 2, tzinfo=UTC)


def test_keys_are_compared_case_and_separator_insensitively() -> None:
    assert normalize_key("Home Airport") == normalize_key("home_airport") == "home-airport"
    assert KINDS["taxonomic"].key({"domain": "airline", "term": "red-eye"}) == "airline/red-eye"


def test_kinds_reject_missing_fields_naming_them() -> None:
    with pytest.raises(InputError) as err:
        kind_of("procedural").check({"name": "x", "description": " ", "content": "y"})
    assert err.value.field == "description"
    with pytest.raises(InputError):
        kind_of("taxonomic").check({"domain": "a/b", "term": "t", "definition": "d"})
    with pytest.raises(InputError):
        kind_of("gossip")


def test_taxonomic_is_project_scoped_and_the_rest_user_scoped() -> None:
    assert scope_for("taxonomic", "p", "u") == MemoryScope(project_id="p")
    for memory_type in ("semantic", "episodic", "procedural", "my-custom-type"):
        assert scope_for(memory_type, "p", "u") == MemoryScope(project_id="p", user_id="u")


@pytest.mark.parametrize("bson_vector", [False, True])
def test_documents_round_trip(bson_vector: bool) -> None:
    c = candidate("semantic", label="seat", text="Prefers the aisle.", at=AT)
    decision = Decision(
        candidate_id=c.candidate_id,
        action=Action.ADD,
        memory_id="mem_1",
        version=1,
        key_match=False,
        similarity=None,
        reason="r",
    )
    version = build_version(c, decision, AT)
    doc = to_document(version, c.candidate_id, bson_vector=bson_vector)
    assert "reinforcement_count" not in doc
    assert doc["key_norm"] == "seat"
    back = from_document(doc)
    assert back.model_dump(exclude={"embedding"}) == version.model_dump(exclude={"embedding"})
    assert np.allclose(back.embedding, version.embedding, atol=1e-6)
    doc["candidate_ids"].append("cand_other")
    assert from_document(doc).reinforcement_count == 2


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_scope_index_keeps_one_row_per_memory_and_ranks_exactly() -> None:
    index = ScopeIndex()
    index.upsert(Row("v1", "m1", 1, "a", "t"), unit(1, 0, 0))
    index.upsert(Row("v2", "m2", 1, "b", "t"), unit(0, 1, 0))
    index.upsert(Row("v1b", "m1", 2, "A", "t2"), unit(0.9, 0.1, 0))  # new version of m1
    index.upsert(Row("v1", "m1", 1, "a", "t"), unit(1, 0, 0))  # an older one is ignored
    assert len(index) == 2
    found = index.top(unit(1, 0, 0), 5)
    assert [r.version_id for r, _ in found] == ["v1b", "v2"]
    assert found[0][1] > found[1][1]
    assert index.keyed("a") is not None
    index.remove("v2", "m2")
    assert [r.memory_id for r, _ in index.top(unit(0, 1, 0), 5)] == ["m1"]
    with pytest.raises(InputError):
        index.top(unit(1, 0), 1)


def test_batched_scores_give_the_same_ranking_as_one_by_one() -> None:
    rng = np.random.default_rng(3)
    index = ScopeIndex()
    for i in range(300):
        index.upsert(Row(f"v{i}", f"m{i}", 1, f"k{i}", "t"), rng.standard_normal(16).astype("f4"))
    queries = rng.standard_normal((4, 16)).astype("f4")
    generation, sims = index.similarities(queries)
    index.upsert(Row("vx", "mx", 1, "kx", "t"), queries[2])  # added after the product
    index.remove("v7", "m7")
    for j, q in enumerate(queries):
        one = [(r.version_id, round(s, 5)) for r, s in index.top(q, 6)]
        batched = [
            (r.version_id, round(s, 5)) for r, s in index.top(q, 6, known=(generation, sims[j]))
        ]
        assert one == batched
    assert index.top(queries[2], 1)[0][0].version_id == "vx"


def test_compaction_keeps_every_live_row() -> None:
    index = ScopeIndex()
    for i in range(3000):
        index.upsert(Row(f"v{i}", f"m{i}", 1, f"k{i}", "t"), unit(1, i % 7 + 1, 0))
    for i in range(2500):
        index.remove(f"v{i}", f"m{i}")
    assert len(index) == 500
    assert len(index.rows) < 3000  # compacted
    assert {r.memory_id for r, _ in index.top(unit(1, 1, 0), 1000)} == {
        f"m{i}" for i in range(2500, 3000)
    }


def test_identity_of_users_and_service_accounts() -> None:
    me = resolve_identity("p", MemoryRequestContext(user_id="u1", session_id="s"))
    assert (me.user_id, me.session_id, me.service_account) == ("u1", "s", False)
    sa = resolve_identity("p", MemoryRequestContext(user_id="u1", service_account="bot"))
    assert (sa.user_id, sa.service_account) == ("sa:bot", True)
    with pytest.raises(ScopeError):
        resolve_identity("p", MemoryRequestContext(user_id="sa:bot"))
    with pytest.raises(InputError):
        resolve_identity("p", MemoryRequestContext(user_id="u\x00"))
    with pytest.raises(InputError):
        resolve_identity("$p", MemoryRequestContext(user_id="u"))
    with pytest.raises(ValueError, match="user_id or a service_account"):
        MemoryRequestContext(session_id="s")
    with pytest.raises(InputError):
        me.model_copy(update={"session_id": None}).session()


@pytest.mark.parametrize("name", ["mongomem.ltm", "mongomem.sdk", "mongomem.stages.reconciler"])
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)

    def order(symbol: str) -> tuple[int, str]:
        return (0 if symbol.isupper() else 1 if symbol[0].isupper() else 2), symbol

    assert list(module.__all__) == sorted(module.__all__, key=order)
    for symbol in module.__all__:
        assert hasattr(module, symbol), symbol


def test_index_cache_drops_least_recently_used_scopes() -> None:
    from mongomem.ltm.index import IndexCache

    cache = IndexCache(None, None, max_rows=2)  # type: ignore[arg-type]
    scopes = [MemoryScope(project_id="p", user_id=f"u{i}") for i in range(3)]
    first = cache.peek(scopes[0], "semantic")
    first.upsert(Row("v0", "m0", 1, "k", "t"), unit(1, 0))
    second = cache.peek(scopes[1], "semantic")
    second.upsert(Row("v1", "m1", 1, "k", "t"), unit(1, 0))
    second.upsert(Row("v2", "m2", 1, "k2", "t"), unit(0, 1))
    cache.peek(scopes[1], "semantic")  # recently used
    cache.peek(scopes[2], "semantic")  # over budget: scope 0 goes
    assert cache.peek(scopes[1], "semantic") is second
    assert cache.peek(scopes[0], "semantic") is not first
