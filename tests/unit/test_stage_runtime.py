"""The stage runtime on the in-memory broker: commit after ack, retries, dead letters,
stop, lag — no servers."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence

import pytest

from mongomem.adapters.kafka import DeadLetter
from mongomem.codec import decode
from mongomem.errors import BrokerError, ConfigError, InputError, LLMRateLimited, StorageError
from mongomem.metrics import CONSUMER_LAG, DEAD_LETTERS
from mongomem.settings import KafkaSettings
from mongomem.stages.runtime import (
    Decision,
    Record,
    RetryPolicy,
    consume,
    run_stage,
    supervise,
)
from mongomem.stages.runtime.memory import MemoryBroker, MemoryPublisher

KAFKA = KafkaSettings(bootstrap="memory:0", topic_prefix="rt")
FAST = RetryPolicy(base_s=0.001, cap_s=0.002, max_attempts=3)


class Echo:
    """Copies each record to ``out`` and waits for the acknowledgements."""

    def __init__(self, publisher: MemoryPublisher, fail: dict[bytes, list[BaseException]]) -> None:
        self.stage = "echo"
        self.publisher = publisher
        self.fail = fail
        self.calls: list[tuple[int, list[bytes | None]]] = []
        self.dead: list[tuple[int, str]] = []
        self.handled = asyncio.Event()

    async def handle(self, partition: int, batch: Sequence[Record]) -> None:
        self.calls.append((partition, [r.value for r in batch]))
        for record in batch:
            errors = self.fail.get(record.value or b"")
            if errors:
                raise errors.pop(0)
        acks = [await self.publisher.send("out", r.value or b"", key=r.key) for r in batch]
        self.handled.set()
        await asyncio.gather(*acks)

    async def dead_lettered(self, record: Record, error: BaseException) -> None:
        self.dead.append((record.offset, type(error).__name__))


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never happened")


def _consuming(
    broker: MemoryBroker, stage: Echo, publisher: MemoryPublisher, stop: asyncio.Event
) -> asyncio.Task[None]:
    source = broker.source("in", "g")
    running = consume(
        source, stage, publisher=publisher, kafka=KAFKA, stop=stop, policy=FAST, poll_timeout_s=0.01
    )
    return asyncio.create_task(running)


async def _run_until(broker: MemoryBroker, stage: Echo, done: Callable[[], bool]) -> None:
    stop = asyncio.Event()
    task = _consuming(broker, stage, stage.publisher, stop)
    while not done():
        await asyncio.sleep(0.005)
        if task.done():
            await task
    stop.set()
    await task


async def test_a_publish_that_never_acks_is_never_committed() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"a", partition=0)
    publisher = broker.publisher()
    publisher.hold()
    stage = Echo(publisher, {})
    stop = asyncio.Event()
    task = _consuming(broker, stage, publisher, stop)
    await stage.handled.wait()
    for _ in range(20):
        await asyncio.sleep(0)
    assert publisher.pending == 1
    assert broker.committed("g", "in") == {}  # not acknowledged → not committed
    publisher.release()
    await _until(lambda: broker.committed("g", "in") == {0: 1})
    stop.set()
    await task
    assert [m.value for m in broker.records("out")] == [b"a"]


async def test_a_retriable_error_is_retried_with_back_off_then_succeeds() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"a", partition=0)
    stage = Echo(broker.publisher(), {b"a": [LLMRateLimited("slow down")]})
    await _run_until(broker, stage, lambda: broker.committed("g", "in") == {0: 1})
    assert [v for _, v in stage.calls] == [[b"a"], [b"a"]]
    assert stage.dead == []
    assert [m.value for m in broker.records("out")] == [b"a"]


async def test_a_permanent_error_is_dead_lettered_once_and_counted() -> None:
    broker = MemoryBroker(partitions=1)
    for value in (b"a", b"bad", b"c"):
        broker.append("in", value, key=b"k", partition=0)
    stage = Echo(broker.publisher(), {b"bad": [InputError("not ours")] * 10})
    before = DEAD_LETTERS.labels("echo")._value.get()
    await _run_until(broker, stage, lambda: broker.committed("g", "in") == {0: 3})
    assert stage.dead == [(1, "InputError")]
    assert DEAD_LETTERS.labels("echo")._value.get() == before + 1
    (letter_record,) = broker.records("rt.dlq.echo")
    letter = decode(letter_record.value, DeadLetter)  # the format `mongomem dlq` reads
    assert (letter.source_offset, letter.original_value(), letter.attempts) == (1, b"bad", 1)
    assert (letter.error_class, letter.retriable, letter_record.key) == ("InputError", False, b"k")
    # the batch failed, then its records went one by one: the good ones reached `out`
    assert sorted(m.value or b"" for m in broker.records("out")) == [b"a", b"c"]


async def test_retriable_errors_out_of_attempts_are_dead_lettered_not_retried_forever() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"a", partition=0)
    stage = Echo(broker.publisher(), {b"a": [LLMRateLimited("again")] * 100})
    await _run_until(broker, stage, lambda: broker.committed("g", "in") == {0: 1})
    assert len(stage.calls) == FAST.max_attempts
    assert stage.dead == [(0, "LLMRateLimited")]


async def test_an_outage_is_retried_until_it_passes() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"a", partition=0)
    stage = Echo(broker.publisher(), {b"a": [StorageError("MongoDB away")] * 7})
    await _run_until(broker, stage, lambda: broker.committed("g", "in") == {0: 1})
    assert len(stage.calls) == 8
    assert stage.dead == []


async def test_a_config_error_stops_the_stage_without_committing() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"a", partition=0)
    stage = Echo(broker.publisher(), {b"a": [ConfigError("bad key")]})
    with pytest.raises(ConfigError):
        await _run_until(broker, stage, lambda: False)
    assert broker.committed("g", "in") == {}


async def test_a_failed_dead_letter_publish_commits_nothing() -> None:
    broker = MemoryBroker(partitions=1)
    broker.append("in", b"bad", partition=0)
    publisher = broker.publisher()
    publisher.fail_next(1, BrokerError("dlq refused"))
    stage = Echo(publisher, {b"bad": [InputError("x")]})
    stop = asyncio.Event()
    # the dead letter is not acknowledged: the stage fails (and restarts), nothing committed
    task = _consuming(broker, stage, publisher, stop)
    with pytest.raises(BrokerError):
        await task
    assert broker.committed("g", "in") == {}


async def test_partitions_are_handled_in_order_and_lag_is_set() -> None:
    broker = MemoryBroker(partitions=2)
    for i in range(6):
        broker.append("in", str(i).encode(), partition=i % 2)
    stage = Echo(broker.publisher(), {})
    await _run_until(broker, stage, lambda: broker.committed("g", "in") == {0: 3, 1: 3})
    for partition in (0, 1):
        seen = [v for p, values in stage.calls if p == partition for v in values]
        assert seen == [str(i).encode() for i in range(partition, 6, 2)]
        assert CONSUMER_LAG.labels("echo", "in", str(partition))._value.get() == 0
    broker.append("in", b"late", partition=0)
    source = broker.source("in", "g")
    assert source.lag() == {0: 1, 1: 0}


def test_the_policy_decides_from_the_error() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=30.0, max_attempts=3, random=lambda: 1.0)
    assert policy.decide(ConfigError("x"), 1) is Decision.FATAL
    assert policy.decide(StorageError("down"), 99) is Decision.OUTAGE
    assert policy.decide(LLMRateLimited("x"), 2) is Decision.RETRY
    assert policy.decide(LLMRateLimited("x"), 3) is Decision.DEAD_LETTER
    assert policy.decide(InputError("x"), 1) is Decision.DEAD_LETTER
    assert policy.decide(ValueError("bug"), 1) is Decision.RETRY  # not ours: it may pass
    assert policy.decide(ValueError("bug"), 3) is Decision.DEAD_LETTER
    assert [policy.delay(n) for n in (1, 2, 3, 10)] == [1.0, 2.0, 4.0, 30.0]  # capped
    assert policy.delay(1, LLMRateLimited("x", retry_after=45)) == 45  # the server's word
    low = RetryPolicy(base_s=1.0, cap_s=30.0, random=lambda: 0.0)
    assert low.delay(3) == 2.0  # jitter: within [d/2, d]


class Forever:
    """A stage that runs until stopped, then drains (records that it did)."""

    name = "forever"

    def __init__(self, failures: list[BaseException] | None = None) -> None:
        self.failures = failures or []
        self.runs = 0
        self.drained = False
        self.running = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        self.runs += 1
        if self.failures:
            raise self.failures.pop(0)
        self.running.set()
        await stop.wait()
        await asyncio.sleep(0)  # the drain
        self.drained = True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_drains_the_stage(sig: signal.Signals) -> None:
    from mongomem.settings import Settings

    stage = Forever()
    task = asyncio.create_task(run_stage(stage, Settings(), count_restarts=False))
    await stage.running.wait()
    os.kill(os.getpid(), sig)
    await task
    assert stage.drained


async def test_a_signal_during_a_restart_back_off_stops_at_once() -> None:
    from mongomem.settings import Settings

    restarted = asyncio.Event()

    class Down(Forever):
        async def run(self, stop: asyncio.Event) -> None:
            self.runs += 1
            if self.runs == 2:
                restarted.set()
            raise BrokerError("broker down")

    stage = Down()
    task = asyncio.create_task(run_stage(stage, Settings(), count_restarts=False))
    await restarted.wait()  # it restarted once (after 0.5-1 s); now it is backing off again
    os.kill(os.getpid(), signal.SIGTERM)
    await task  # returns: the SIGTERM is not lost across restarts
    assert stage.runs == 2


async def test_supervise_restarts_retriable_failures_and_raises_final_ones() -> None:
    fast = RetryPolicy(base_s=0.001, cap_s=0.001)
    stage = Forever([BrokerError("down"), StorageError("away")])
    stop = asyncio.Event()
    counted: list[str] = []

    async def on_restart(name: str, error: Exception) -> None:
        counted.append(f"{name}: {type(error).__name__}")

    task = asyncio.create_task(supervise(stage, stop, restarts=fast, on_restart=on_restart))
    await stage.running.wait()
    stop.set()
    await task
    assert stage.runs == 3
    assert counted == ["forever: BrokerError", "forever: StorageError"]
    with pytest.raises(ConfigError):
        await supervise(Forever([ConfigError("bad")]), asyncio.Event(), restarts=fast)
