"""Fair embedding between tenants and per-request deadlines (issue 17), with no timing.

The embedder here is a gated fake (NOT a model): each model call waits until
the test opens it, and every call is written to an event log, so the order in
which the scheduler serves tenants is asserted exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from mongomem.deadlines import ABANDONED, Deadline, check_deadline, current_deadline, within
from mongomem.errors import DeadlineExceeded, EmbeddingError
from mongomem.service.deadlines import RequestDeadlines
from mongomem.service.scheduling import (
    TENANT,
    DepthObserver,
    FairEmbedder,
    FairScheduler,
    estimated_tokens,
)

WINDOW = 512
BIG = "x" * 4096  # costs a whole window (as A0, A1, ...: see big())
SMALL = "where does the user fly"  # a few tokens


class GatedEmbedder:
    """A fake embedder (NOT a model): logs each call's texts, answers when the test opens it."""

    MAX_TOKENS = WINDOW

    def __init__(self, *, gated: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.gated = gated
        self._gates: list[asyncio.Event] = []
        self.started = asyncio.Event()

    @property
    def name(self) -> str:
        return "fake:gated (NOT a model)"

    @property
    def dimensions(self) -> int:
        return 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        gate = asyncio.Event()
        self._gates.append(gate)
        self.started.set()
        if self.gated:
            await gate.wait()
        if any(t == "bad" for t in texts):
            raise EmbeddingError("the fake refuses 'bad'")
        return [[float(len(t)), 1.0] for t in texts]

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed([f"query: {t}" for t in texts])

    def open_next(self) -> None:
        """Let the oldest waiting call answer."""
        for gate in self._gates:
            if not gate.is_set():
                gate.set()
                return
        raise AssertionError("no call is waiting")

    async def settle(self) -> None:
        for _ in range(20):  # let every ready task run; no clock involved
            await asyncio.sleep(0)


def scheduler(
    fake: GatedEmbedder,
    *,
    batch_texts: int = 16,
    concurrency: int = 1,
    observe: DepthObserver | None = None,
) -> FairScheduler:
    return FairScheduler(
        fake.embed,
        cost=lambda t: estimated_tokens(t, WINDOW),
        quantum=WINDOW,
        batch_texts=batch_texts,
        concurrency=concurrency,
        observe=observe,
    )


async def drain(fake: GatedEmbedder, tasks: list[asyncio.Task[list[list[float]]]]) -> None:
    while not all(t.done() for t in tasks):
        await fake.settle()
        if any(not g.is_set() for g in fake._gates):
            fake.open_next()
        await fake.settle()


async def test_a_small_job_of_b_waits_for_one_batch_of_a_only() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake)
    a = [asyncio.create_task(fair.submit("A", [f"{BIG}{i}"])) for i in range(3)]
    await fake.settle()
    assert fake.calls == [[f"{BIG}0"]]  # A's first is in flight, two more are queued
    b = asyncio.create_task(fair.submit("B", [SMALL]))
    await drain(fake, [*a, b])
    assert fake.calls == [[f"{BIG}0"], [SMALL], [f"{BIG}1"], [f"{BIG}2"]]
    assert b.result() == [[float(len(SMALL)), 1.0]]


async def test_plain_fifo_would_serve_a_first_so_the_order_is_the_schedulers() -> None:
    # the same arrivals from one tenant are served in order: fairness is between tenants
    fake = GatedEmbedder()
    fair = scheduler(fake)
    jobs = [asyncio.create_task(fair.submit("A", [f"{BIG}{i}"])) for i in range(3)]
    await fake.settle()
    jobs.append(asyncio.create_task(fair.submit("A", [SMALL])))
    await drain(fake, jobs)
    assert fake.calls == [[f"{BIG}0"], [f"{BIG}1"], [f"{BIG}2"], [SMALL]]


async def test_tenants_share_by_tokens_not_by_requests() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake, batch_texts=1)  # one text a call, to see every turn
    a = [asyncio.create_task(fair.submit("A", [f"{BIG}{i}"])) for i in range(3)]
    await fake.settle()
    smalls = [f"{SMALL} {i}" for i in range(4)]
    b = [asyncio.create_task(fair.submit("B", [s])) for s in smalls]
    await drain(fake, [*a, *b])
    # in one turn B spends its quantum on all of its small texts; A gets one window a turn
    assert fake.calls == [[f"{BIG}0"], *([s] for s in smalls), [f"{BIG}1"], [f"{BIG}2"]]


async def test_queued_small_texts_go_in_one_model_call() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake, batch_texts=3)
    first = asyncio.create_task(fair.submit("A", [SMALL]))
    await fake.settle()
    rest = [
        asyncio.create_task(fair.submit(t, [f"{SMALL} {t}{i}"])) for i in range(2) for t in "AB"
    ]
    await drain(fake, [first, *rest])
    assert fake.calls[0] == [SMALL]
    assert [len(c) for c in fake.calls[1:]] == [3, 1]  # batch_texts bounds a call
    assert sorted(t for c in fake.calls[1:] for t in c) == sorted(
        f"{SMALL} {t}{i}" for i in range(2) for t in "AB"
    )
    for task, (i, t) in zip(rest, [(i, t) for i in range(2) for t in "AB"], strict=True):
        assert task.result() == [[float(len(f"{SMALL} {t}{i}")), 1.0]]


async def test_a_batch_never_costs_more_than_one_window() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake)
    first = asyncio.create_task(fair.submit("B", [SMALL]))
    await fake.settle()
    rest = [
        asyncio.create_task(fair.submit("B", [SMALL + "!"])),
        asyncio.create_task(fair.submit("A", [BIG])),
    ]
    await drain(fake, [first, *rest])
    # B has spent its tokens, A was idle: A's window goes first, and alone
    assert fake.calls == [[SMALL], [BIG], [SMALL + "!"]]


async def test_a_failing_text_fails_only_its_own_job() -> None:
    fake = GatedEmbedder(gated=False)
    blocker = asyncio.Event()

    async def slow(texts: list[str]) -> list[list[float]]:
        await blocker.wait()
        return await fake.embed(texts)

    fair = FairScheduler(slow, cost=lambda t: 1, quantum=WINDOW)
    held = asyncio.create_task(fair.submit("A", ["first"]))
    await fake.settle()
    good = asyncio.create_task(fair.submit("A", ["good"]))
    bad = asyncio.create_task(fair.submit("B", ["bad"]))
    await fake.settle()
    blocker.set()
    await asyncio.gather(held, good, bad, return_exceptions=True)
    assert good.result() == [[4.0, 1.0]]
    with pytest.raises(EmbeddingError):
        bad.result()
    assert fake.calls == [["first"], ["bad", "good"], ["bad"], ["good"]]


async def test_an_abandoned_request_is_never_embedded() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake)
    held = asyncio.create_task(fair.submit("A", [BIG]))
    await fake.settle()
    deadline = Deadline(None)

    async def request() -> list[list[float]]:
        with within(deadline):
            return await fair.submit("B", ["abandoned text"])

    gone = asyncio.create_task(request())
    await fake.settle()
    deadline.abandon()  # the client closed the connection
    await fake.settle()
    with pytest.raises(DeadlineExceeded, match="closed the connection"):
        gone.result()
    later = asyncio.create_task(fair.submit("B", [SMALL]))
    await drain(fake, [held, later])
    assert fake.calls == [[BIG], [SMALL]]
    assert fair.queued == 0


async def test_a_cancelled_caller_drops_its_job() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake)
    held = asyncio.create_task(fair.submit("A", [BIG]))
    await fake.settle()
    dropped = asyncio.create_task(fair.submit("B", ["dropped"]))
    await fake.settle()
    dropped.cancel()
    await drain(fake, [held])
    await fake.settle()
    assert fake.calls == [[BIG]]


async def test_the_queue_depth_is_reported_as_jobs_wait_and_leave() -> None:
    fake = GatedEmbedder()
    depth = {"jobs": 0, "tokens": 0}
    seen: list[tuple[int, int]] = []

    def observe(jobs: int, tokens: int) -> None:
        depth["jobs"] += jobs
        depth["tokens"] += tokens
        seen.append((depth["jobs"], depth["tokens"]))

    fair = scheduler(fake, observe=observe)
    held = asyncio.create_task(fair.submit("A", [BIG]))  # taken at once: in flight, not queued
    await fake.settle()
    waiting = [asyncio.create_task(fair.submit("B", [SMALL])) for _ in range(2)]
    dropped = asyncio.create_task(fair.submit("C", [BIG]))
    await fake.settle()
    small = estimated_tokens(SMALL, WINDOW)
    assert (fair.queued, fair.queued_tokens) == (3, 2 * small + WINDOW)
    assert depth == {"jobs": 3, "tokens": 2 * small + WINDOW}
    dropped.cancel()  # a job that leaves without being embedded stops counting at once
    await fake.settle()
    assert depth == {"jobs": 2, "tokens": 2 * small}
    await drain(fake, [held, *waiting])
    assert depth == {"jobs": 0, "tokens": 0}
    assert fair.queued_tokens == 0
    assert max(jobs for jobs, _ in seen) == 3


def test_the_service_gauges_follow_each_lane() -> None:
    from prometheus_client import REGISTRY

    from mongomem.service.http import embedding_queue_observer

    def read() -> tuple[float, float]:
        """The query lane's two gauges, as /metrics shows them."""
        jobs = REGISTRY.get_sample_value("mongomem_service_embedding_queue_jobs", {"lane": "query"})
        tokens = REGISTRY.get_sample_value(
            "mongomem_service_embedding_queue_tokens", {"lane": "query"}
        )
        return (jobs or 0.0, tokens or 0.0)

    observe = embedding_queue_observer("query")
    before = read()
    observe(2, 40)
    observe(-1, -15)
    assert read() == (before[0] + 1, before[1] + 25)
    observe(-1, -25)
    assert read() == before


async def test_a_deadline_that_has_passed_refuses_at_once() -> None:
    fake = GatedEmbedder()
    fair = scheduler(fake)
    with within(Deadline(0.0)):
        with pytest.raises(DeadlineExceeded, match="deadline passed"):
            check_deadline()
        with pytest.raises(DeadlineExceeded):
            await fair.submit("A", [SMALL])
    assert fake.calls == []
    check_deadline()  # outside the block: no deadline, nothing to refuse


async def test_an_abandoned_deadline_stays_ended_and_says_why() -> None:
    deadline = Deadline(3600.0)
    assert deadline.ended is None
    deadline.abandon()
    deadline.close()
    assert deadline.ended == ABANDONED
    with pytest.raises(DeadlineExceeded):
        deadline.check()


async def test_fair_embedder_queues_by_the_tasks_tenant_in_two_lanes() -> None:
    fake = GatedEmbedder()
    fair = FairEmbedder(fake)

    async def as_tenant(tenant: str, query: bool, text: str) -> list[list[float]]:
        TENANT.set(tenant)
        return await (fair.embed_query([text]) if query else fair.embed([text]))

    saves = [asyncio.create_task(as_tenant("A", False, f"{BIG}{i}")) for i in range(2)]
    await fake.settle()
    search = asyncio.create_task(as_tenant("B", True, SMALL))
    await fake.settle()
    # the query lane runs beside the stored lane: it does not wait for A's save
    assert fake.calls == [[f"{BIG}0"], [f"query: {SMALL}"]]
    fake._gates[1].set()
    await fake.settle()
    assert search.done()
    assert not saves[0].done()
    small = asyncio.create_task(as_tenant("B", False, SMALL))
    await drain(fake, [*saves, small])
    assert fake.calls[2:] == [[SMALL], [f"{BIG}1"]]
    assert fair.name == fake.name
    assert fair.dimensions == 2


def test_the_cost_estimate_is_bounded_by_the_window() -> None:
    assert estimated_tokens("", WINDOW) == 2
    assert estimated_tokens("a" * 40, WINDOW) == 12
    assert estimated_tokens("a" * 100_000, WINDOW) == WINDOW
    with pytest.raises(ValueError, match="at least 1"):
        FairScheduler(GatedEmbedder().embed, cost=len, quantum=0)


async def test_the_middleware_abandons_a_request_whose_client_disconnects() -> None:
    hang_up = asyncio.Event()
    seen: list[str | None] = []
    replayed: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        if not replayed:
            replayed.append({"type": "http.request", "body": b"{}", "more_body": False})
            return replayed[0]
        await hang_up.wait()
        return {"type": "http.disconnect"}

    async def app(scope: object, receive_: object, send: object) -> None:
        deadline = current_deadline()
        assert deadline is not None
        assert (await receive_())["body"] == b"{}"  # type: ignore[operator]
        seen.append(deadline.ended)
        hang_up.set()  # the client goes away while the request is handled
        assert (await receive_())["type"] == "http.disconnect"  # type: ignore[operator]
        seen.append(deadline.ended)  # ended before the app heard of the disconnect

    async def send(message: object) -> None:
        raise AssertionError("nothing is sent")

    middleware = RequestDeadlines(app, None)
    await middleware({"type": "http", "path": "/v1/x"}, receive, send)
    assert seen == [None, ABANDONED]


async def test_the_middleware_leaves_exempt_paths_without_a_deadline() -> None:
    seen: list[object] = []

    async def app(scope: object, receive: object, send: object) -> None:
        seen.append(current_deadline())

    middleware = RequestDeadlines(app, 5.0, exempt=lambda p: p.startswith("/v1/spaces/import"))
    await middleware({"type": "http", "path": "/v1/spaces/import"}, None, None)  # type: ignore[arg-type]
    await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == [None, None]
