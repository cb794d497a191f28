"""Backpressure that helps (issue 25): a busy answer's ``Retry-After`` follows the embedding
queue's expected wait, measured on a fake clock (no timing), and a search query has a cap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from mongomem.deadlines import Deadline, within
from mongomem.errors import DeadlineExceeded, InputError
from mongomem.sdk.errormap import MAX_RETRY_AFTER_S, error_body, error_from, retry_after_s
from mongomem.sdk.transport import check_query
from mongomem.sdk.wire import MAX_QUERY_CHARS, SearchRequest
from mongomem.service.scheduling import FairScheduler

COST = 10  # tokens of every text here
RATE = 100.0  # tokens a second the fake model embeds, on the fake clock


class FakeModel:
    """A fake embedder call (NOT a model): each call takes ``texts * COST / RATE`` seconds of
    the fake clock; calls after the first wait until :attr:`gate` opens."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0
        self.gate = asyncio.Event()
        self.busy = asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls > 1:
            self.busy.set()
            await self.gate.wait()
        self.now += len(texts) * COST / RATE
        return [[1.0] for _ in texts]


async def test_a_job_dropped_at_its_deadline_says_how_long_the_queue_takes() -> None:
    model = FakeModel()
    scheduler = FairScheduler(
        model, cost=lambda _t: COST, quantum=COST, batch_texts=1, clock=model.clock
    )
    assert scheduler.expected_wait_s == 0.0
    await scheduler.submit("a", ["warm-up"])  # measures the rate: 100 tokens a second
    assert scheduler.expected_wait_s == 0.0

    flight = asyncio.create_task(scheduler.submit("a", ["in flight"]))
    await model.busy.wait()
    waiting = [asyncio.create_task(scheduler.submit("b", [f"b{i}"])) for i in range(4)]
    await asyncio.sleep(0)
    assert scheduler.queued == 4
    assert scheduler.expected_wait_s == pytest.approx(4 * COST / RATE)

    async def late() -> None:
        with within(Deadline(None)) as deadline:
            job = asyncio.create_task(scheduler.submit("c", ["c0"]))
            await asyncio.sleep(0)
            deadline.abandon()
            await job

    with pytest.raises(DeadlineExceeded) as caught:
        await late()
    assert caught.value.retry_after == pytest.approx(5 * COST / RATE)  # the four, and itself
    model.gate.set()
    await asyncio.gather(flight, *waiting)


async def test_with_no_call_measured_there_is_no_hint() -> None:
    model = FakeModel()
    model.calls = 1  # every call waits for the gate
    scheduler = FairScheduler(
        model, cost=lambda _t: COST, quantum=COST, batch_texts=1, clock=model.clock
    )
    flight = asyncio.create_task(scheduler.submit("a", ["in flight"]))
    await model.busy.wait()
    with within(Deadline(None)) as deadline:
        job = asyncio.create_task(scheduler.submit("b", ["b"]))
        await asyncio.sleep(0)
        assert scheduler.expected_wait_s is None
        deadline.abandon()
        with pytest.raises(DeadlineExceeded) as caught:
            await job
    assert caught.value.retry_after is None
    model.gate.set()
    await flight


@pytest.mark.parametrize(
    ("hint", "header"),
    [(None, 1), (0.2, 1), (7.3, 8), (42.0, 42), (10_000.0, MAX_RETRY_AFTER_S)],
)
def test_retry_after_is_the_hint_rounded_up_and_capped(hint: float | None, header: int) -> None:
    exc = DeadlineExceeded("busy", retry_after=hint)
    assert retry_after_s(exc) == header
    body = error_body(exc, redact=True)
    assert body.retry_after == header
    back = error_from(503, {"error": body.model_dump()})
    assert isinstance(back, DeadlineExceeded)
    assert back.retry_after == header


def test_a_search_query_has_a_length_cap_on_every_surface() -> None:
    check_query("x" * MAX_QUERY_CHARS)
    with pytest.raises(InputError, match=f"at most {MAX_QUERY_CHARS}") as caught:
        check_query("x" * (MAX_QUERY_CHARS + 1))
    assert caught.value.field == "query"
    with pytest.raises(InputError, match="empty"):
        check_query("  ")
    fields = {"project_id": "p", "user_id": "u", "memory_type": "semantic"}
    SearchRequest.model_validate({**fields, "query": "x" * MAX_QUERY_CHARS})
    with pytest.raises(ValueError, match=f"at most {MAX_QUERY_CHARS} characters"):
        SearchRequest.model_validate({**fields, "query": "x" * (MAX_QUERY_CHARS + 1)})
    with pytest.raises(ValueError, match="should match pattern"):
        SearchRequest.model_validate({**fields, "query": "   "})
