"""Order by the world, not by the queue (SPEC L2), on the real server, as a property.

However a user's statements reach the store — in order, reversed, shuffled,
one at a time or batched — the current memory of each key is the value of the
latest statement, the timeline of stated values (every evidence point of
every version, in evidence order) is the same as for one in-order pass, and so
is the version list: the versions in history order, each with its text, its
status and the evidence it holds (version *numbers* follow the processing
order and are not compared).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import MEMORIES, connect
from mongomem.ltm import MemoryStore
from mongomem.ltm.documents import from_document
from mongomem.ltm.plan import evidence_rank, history_order
from mongomem.ltm.testing import candidate
from mongomem.models import Evidence, MemoryCandidate, MemoryVersion, stable_id
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2023, 5, 1, 9, 0, tzinfo=UTC)
KEYS = ("home-airport", "seat")
VALUES = {
    "home-airport": ("Boston", "Denver", "Austin"),
    "seat": ("aisle", "window", "exit row"),
}
# (key, value, day, session, seq): days repeat, so statements of one instant are ordered
# by session and seq, as in an import where a whole session carries one date.
STATEMENT = st.tuples(
    st.sampled_from(KEYS),
    st.integers(0, 2),
    st.integers(0, 3),
    st.sampled_from(("s1", "s2")),
    st.integers(1, 4),
)


def statement(project: str, i: int, spec: tuple[str, int, int, str, int]) -> MemoryCandidate:
    key, value, day, session, seq = spec
    text = f"The user's {key.replace('-', ' ')} is {VALUES[key][value]}."
    made = candidate(
        "semantic", project_id=project, snapshot=f"snap-{i}", label=key, text=text, at=T0
    )
    evidence = Evidence(
        source="snapshot",
        ref=f"snap-{i}",
        session_id=session,
        user_id="u1",
        at=T0 + timedelta(days=day),
        seqs=(seq,),
    )
    cid = stable_id("cand", project, i)  # the ledger keys on it: one per project and statement
    return made.model_copy(update={"evidence": evidence, "candidate_id": cid})


def timeline(versions: list[MemoryVersion]) -> list[str]:
    """The stated values in evidence order, runs of one value merged."""
    points = sorted((evidence_rank(e), v.text) for v in versions for e in v.evidence)
    out: list[str] = []
    for _, text in points:
        if not out or out[-1] != text:
            out.append(text)
    return out


def version_list(versions: list[MemoryVersion]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The versions in history order: text, status and the ranks of their evidence."""
    return [
        (v.text, v.status.value, tuple(sorted(evidence_rank(e) for e in v.evidence)))
        for v in history_order(versions)
    ]


Outcome = dict[str, tuple[str, list[str], list[tuple[str, str, tuple[str, ...]]]]]


async def outcome(
    settings_: Settings, statements: list[MemoryCandidate], project: str, batch: int
) -> Outcome:
    """Reconcile ``statements`` in that order (``batch`` at a time); per key: the current
    text, the timeline and the version list."""
    client = connect(settings_.mongodb)
    try:
        store = MemoryStore(client[settings_.mongodb.database])
        await store.setup(probe=False)
        for start in range(0, len(statements), batch):
            chunk = statements[start : start + batch]
            if batch == 1:
                await store.reconcile(chunk[0])
            else:
                await store.reconcile_many(chunk)
        docs = (
            await client[settings_.mongodb.database][MEMORIES]
            .find({"scope.project_id": project})
            .to_list()
        )
    finally:
        await client.close()
    versions = [from_document(d) for d in docs]
    result: Outcome = {}
    for key in KEYS:
        mine = [v for v in versions if v.key == key]
        if not mine:
            continue
        (current,) = [v for v in mine if v.status == "current"]
        ordered = history_order(mine)
        assert ordered[-1] == current, "the current version ends the history in world order"
        result[key] = (current.text, timeline(mine), version_list(mine))
    return result


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    specs=st.lists(STATEMENT, min_size=2, max_size=7),
    order=st.randoms(use_true_random=False),
    batch=st.sampled_from((1, 3, 100)),
)
def test_any_processing_order_gives_the_same_current_memory_and_timeline(
    settings: Settings, specs: list[tuple[str, int, int, str, int]], order: object, batch: int
) -> None:
    run = uuid.uuid4().hex[:8]
    in_order_project, shuffled_project = f"in-{run}", f"shuf-{run}"
    ordered = [statement(in_order_project, i, s) for i, s in enumerate(specs)]
    ordered.sort(key=lambda c: evidence_rank(c.evidence))
    shuffled = [statement(shuffled_project, i, s) for i, s in enumerate(specs)]
    order.shuffle(shuffled)  # type: ignore[attr-defined]

    expected = asyncio.run(outcome(settings, ordered, in_order_project, 1))
    got = asyncio.run(outcome(settings, shuffled, shuffled_project, batch))
    assert got == expected
    for key, (current, _, _) in expected.items():
        latest = max((c for c in ordered if c.key == key), key=lambda c: evidence_rank(c.evidence))
        assert current == latest.text, "the latest statement is current"


def test_a_reversed_pass_gives_the_in_order_result(settings: Settings) -> None:
    """The reported case: window, aisle, window said in that order, processed backwards."""
    specs = [("seat", 1, 0, "s1", 1), ("seat", 0, 1, "s1", 1), ("seat", 1, 2, "s1", 1)]
    run = uuid.uuid4().hex[:8]  # ids of its own: a rerun on the same servers replays none
    forward = [statement(f"fwd-{run}", i, s) for i, s in enumerate(specs)]
    backward = [statement(f"bwd-{run}", i, s) for i, s in enumerate(specs)][::-1]
    expected = asyncio.run(outcome(settings, forward, f"fwd-{run}", 1))
    got = asyncio.run(outcome(settings, backward, f"bwd-{run}", 1))
    assert got == expected
    window = "The user's seat is window."
    aisle = "The user's seat is aisle."
    assert expected["seat"][:2] == (window, [window, aisle, window])
    assert [v[:2] for v in expected["seat"][2]] == [
        (window, "superseded"),
        (aisle, "superseded"),
        (window, "current"),
    ]


def test_a_statement_inside_a_versions_evidence_splits_it(settings: Settings) -> None:
    """window (day 0), aisle (day 1), window (day 2), processed day 0, day 2, day 1: the
    two windows were one version (reinforced) when aisle arrived between them; the version
    list is still the in-order one — window, aisle, window — not aisle, window."""
    specs = [("seat", 1, 0, "s1", 1), ("seat", 0, 1, "s1", 1), ("seat", 1, 2, "s1", 1)]
    run = uuid.uuid4().hex[:8]
    forward = [statement(f"fwd-{run}", i, s) for i, s in enumerate(specs)]
    split = [statement(f"split-{run}", i, s) for i, s in enumerate(specs)]
    expected = asyncio.run(outcome(settings, forward, f"fwd-{run}", 1))
    got = asyncio.run(outcome(settings, [split[0], split[2], split[1]], f"split-{run}", 1))
    assert got == expected


async def test_recall_as_of_a_date_and_by_subject(settings: Settings) -> None:
    """SPEC L5/L3: what was current on a date, from history; memories about one person."""
    specs = [("seat", 1, 0, "s1", 1), ("seat", 0, 1, "s1", 1), ("seat", 1, 2, "s1", 1)]
    project = f"asof-{uuid.uuid4().hex[:8]}"  # its own ids: no other test's memories
    seats = [statement(project, i, s) for i, s in enumerate(specs)][::-1]  # processed backwards
    melanie = candidate(
        "semantic",
        project_id=project,
        snapshot="snap-m",
        label="melanie-art",
        text="Melanie painted a sunrise.",
        at=T0,
    ).model_copy(update={"subject": "Melanie", "candidate_id": stable_id("cand", project, "m")})
    await outcome(settings, [*seats, melanie], project, 1)
    window, aisle = "The user's seat is window.", "The user's seat is aisle."
    async with AsyncMemory(
        project_id=project, settings=settings, embedder=HashingEmbedder(64)
    ) as m:
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        (now,) = [h.memory for h in await chat.search_semantic("seat", subject="user")]
        assert now.text == window
        day1 = T0 + timedelta(days=1, hours=1)
        (then,) = [h.memory for h in await chat.search_semantic("seat", as_of=day1, subject="user")]
        assert (then.text, then.observed_at) == (aisle, T0 + timedelta(days=1))
        assert await chat.search_semantic("seat", as_of=T0 - timedelta(days=1)) == []
        assert (await chat.value_as_of(now.memory_id, day1)).text == aisle  # type: ignore[union-attr]
        assert [v.text for v in await chat.history(now.memory_id)] == [window, aisle, window]
        assert [v.text for v in await chat.history(now.memory_id, as_of=day1)] == [window, aisle]
        (hers,) = [h.memory for h in await chat.search_semantic("painted", subject="melanie")]
        assert (hers.subject, hers.text) == ("Melanie", "Melanie painted a sunrise.")
        context = await chat.build_context("seat", as_of=day1, include=["semantic"])
        assert f"{aisle} (said 2023-05-02)" in context.text
        assert window not in context.text
        plain = await chat.build_context("seat", include=["semantic"])
        assert f"{window} (said 2023-05-03)" in plain.text
