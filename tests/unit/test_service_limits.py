"""Per-API-key rate limits: the token bucket on a fake clock, 429 over the wire (SPEC G2)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from mongomem.errors import RateLimitExceeded, StorageError
from mongomem.sdk import HttpTransport, Identity
from mongomem.sdk.errormap import error_body, error_from, retry_after_s, status_for
from mongomem.service import Bucket, RateLimiter, take


class FakeClock:
    """Seconds that move only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def limiter(rate: float = 2.0, burst: int = 3) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    return RateLimiter(rate, burst, clock=clock), clock


def test_a_key_gets_its_burst_then_waits_for_the_refill() -> None:
    limits, clock = limiter(rate=2.0, burst=3)
    assert [limits.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limits.acquire("a") == pytest.approx(0.5)
    clock.advance(0.25)
    assert limits.acquire("a") == pytest.approx(0.25)  # half a token back, half to go
    clock.advance(0.25)
    assert limits.acquire("a") == 0.0
    assert limits.acquire("a") == pytest.approx(0.5)


def test_a_refused_request_takes_nothing() -> None:
    limits, clock = limiter(rate=4.0, burst=1)
    assert limits.acquire("a") == 0.0
    for _ in range(10):  # hammering does not push the next token further away
        assert limits.acquire("a") == pytest.approx(0.25)
    clock.advance(0.25)
    assert limits.acquire("a") == 0.0


def test_waiting_the_advised_time_always_lets_the_request_in() -> None:
    limits, clock = limiter(rate=3.0, burst=2)
    for _ in range(50):
        wait = limits.acquire("a")
        if wait:
            clock.advance(wait)
            assert limits.acquire("a") == 0.0
        clock.advance(0.01)


def test_an_idle_key_refills_to_its_burst_and_no_more() -> None:
    limits, clock = limiter(rate=10.0, burst=3)
    for _ in range(3):
        limits.acquire("a")
    clock.advance(3600)
    assert [limits.acquire("a") for _ in range(4)][-1] > 0


def test_keys_have_buckets_of_their_own() -> None:
    limits, _ = limiter(rate=1.0, burst=2)
    assert [limits.acquire("a") for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]
    assert [limits.acquire("b") for _ in range(2)] == [0.0, 0.0]
    assert limits.acquire("a") > 0


def test_a_clock_that_seems_to_go_back_grants_nothing() -> None:
    bucket, wait = take(Bucket(tokens=0.0, at=10.0), 5.0, 1.0, 3)
    assert bucket == Bucket(tokens=0.0, at=10.0)
    assert wait == pytest.approx(1.0)
    assert take(bucket, 10.5, 1.0, 3)[1] == pytest.approx(0.5)


def test_keys_whose_buckets_are_full_again_are_forgotten() -> None:
    limits, clock = limiter(rate=1.0, burst=2)
    limits.acquire("busy")
    limits.acquire("busy")
    limits.acquire("idle")
    clock.advance(1.0)  # idle is full again; busy has one token of two
    assert limits.sweep() == 1
    assert len(limits) == 1
    assert limits.acquire("idle") == 0.0
    assert limits.acquire("busy") == 0.0
    assert limits.acquire("busy") == pytest.approx(1.0)


def test_many_keys_used_once_take_bounded_memory() -> None:
    limits, clock = limiter(rate=10.0, burst=5)
    for i in range(20_000):
        limits.acquire(f"key-{i}")
        clock.advance(0.001)  # each key is full again 0.1 s after its one request
    assert len(limits) <= 2048


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_limit_must_allow_something(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        RateLimiter(rate, burst)


# -- over the wire ------------------------------------------------------------------


def test_rate_limit_answers_429_with_whole_seconds_to_wait() -> None:
    exc = RateLimitExceeded("slow down", retry_after=0.2)
    assert (status_for(exc), retry_after_s(exc)) == (429, 1)
    assert retry_after_s(RateLimitExceeded("x", retry_after=2.01)) == 3
    assert retry_after_s(RateLimitExceeded("x")) == 1
    payload = json.loads(json.dumps({"error": error_body(exc).model_dump(exclude_none=True)}))
    assert payload["error"] == {
        "type": "RateLimitExceeded",
        "message": "slow down",
        "retriable": True,
        "retry_after": 1,
    }
    back = error_from(429, payload)
    assert isinstance(back, RateLimitExceeded)
    assert (back.retriable, back.retry_after) == (True, 1)


def test_a_429_without_our_body_is_a_rate_limit_with_the_headers_wait() -> None:
    back = error_from(429, None, retry_after=7.0)
    assert isinstance(back, RateLimitExceeded)
    assert back.retry_after == 7.0
    assert type(error_from(503, None, retry_after=7.0)) is StorageError


WHO = Identity(project_id="travel", user_id="alice", session_id="s1")
SAVED = {"action": "ADD", "memory_id": "m1", "version": 1, "version_id": "v1", "reason": "new"}


def transport(
    handler: httpx.MockTransport, *, retries: int = 2, backoff_s: float = 0.25
) -> HttpTransport:
    client = httpx.AsyncClient(transport=handler, base_url="http://memory.test")
    return HttpTransport(
        "http://memory.test",
        api_key="k" * 20,
        client=client,
        keyed_save_retries=retries,
        retry_backoff_s=backoff_s,
    )


def too_many(retry_after: float, header: str | None = None) -> httpx.Response:
    body = {"type": "RateLimitExceeded", "message": "over", "retriable": True}
    if retry_after:
        body["retry_after"] = retry_after
    headers = {"Retry-After": header} if header is not None else {}
    return httpx.Response(429, json={"error": body}, headers=headers)


async def test_the_http_client_raises_a_429_as_a_retriable_rate_limit() -> None:
    t = transport(httpx.MockTransport(lambda request: too_many(2, "2")))
    with pytest.raises(RateLimitExceeded) as err:
        await t.list_domains(WHO)
    assert (err.value.retriable, err.value.retry_after) == (True, 2)

    proxy = httpx.Response(429, text="Too Many Requests", headers={"Retry-After": "4"})
    bare = transport(httpx.MockTransport(lambda request: proxy))
    with pytest.raises(RateLimitExceeded) as err:
        await bare.list_domains(WHO)
    assert err.value.retry_after == 4.0
    await t.close()
    await bare.close()


async def test_a_keyed_save_waits_the_retry_after_of_a_429() -> None:
    sent: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        if len(sent) == 1:
            return too_many(0.3)
        return httpx.Response(200, json={"result": SAVED})

    t = transport(httpx.MockTransport(answer), backoff_s=0.001)
    saved = await t.save(WHO, "semantic", {"label": "seat", "text": "Aisle."}, "seat-1")
    assert saved.memory_id == "m1"
    assert len(sent) == 2
    assert sent[1] - sent[0] >= 0.3  # the service's wait, not the 1 ms back-off

    refused = 0

    def always(request: httpx.Request) -> httpx.Response:
        nonlocal refused
        refused += 1
        return too_many(0.01)

    t = transport(httpx.MockTransport(always), retries=2, backoff_s=0.001)
    with pytest.raises(RateLimitExceeded):
        await t.save(WHO, "semantic", {"label": "seat", "text": "Aisle."}, "seat-1")
    assert refused == 3
    with pytest.raises(RateLimitExceeded):  # without a key a save is the caller's to retry
        await t.save(WHO, "semantic", {"label": "seat", "text": "Aisle."})
    assert refused == 4
    await t.close()


def test_the_body_limit_of_a_users_import_is_that_route_alone() -> None:
    from mongomem.service.http import BodyLimits

    limits = BodyLimits(10, {"/v1/spaces/import": 64}, {"import": 256})
    assert limits.of("/v1/users/alice/import") == 256
    assert limits.of("/v1/users/a%2Fb/import") == 256  # an escaped "/" is one segment
    assert limits.of("/v1/users/alice/memories/import") == 10  # a save of type "import"
    assert limits.of("/v1/users//import") == 10
    assert limits.of("/v1/users/alice/sessions") == 10
    assert limits.of("/v1/spaces/import") == 64


def test_imports_and_exports_are_the_transfers_without_a_deadline() -> None:
    from mongomem.service.app import _bulk_transfer

    assert _bulk_transfer("/v1/spaces/import")
    assert _bulk_transfer("/v1/users/ana/import")
    assert _bulk_transfer("/v1/users/ana%2Fb/export")
    assert not _bulk_transfer("/v1/users/ana/memories/semantic")
    assert not _bulk_transfer("/v1/users/ana/sessions/import")  # a session named "import"
    assert not _bulk_transfer("/v1/users//import")
