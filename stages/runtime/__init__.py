"""The one stage runtime: ports, the consume loop, retries, dead letters, signals.

Every stream stage runs on it. A consumer stage provides its pure core plus
:meth:`~mongomem.stages.runtime.ports.ConsumerStage.handle` ``(partition,
batch)``; :func:`consume` feeds it from a
:class:`~mongomem.stages.runtime.ports.RecordSource` and
:func:`run_stage` runs it as a process (signals, drain, restarts).

A stage that must not leave the CPU idle during every acknowledgement round
trip is a :class:`~mongomem.stages.runtime.ports.PipelinedStage` instead:
``submit(partition, batch)`` does the batch's in-order work, hands its
outputs over and returns an awaitable of their acknowledgement; ``consume``
handles the next poll meanwhile, keeping at most ``in_flight`` submitted
batches per partition unacknowledged (then it calls the stage's ``flush``
and awaits the oldest), and after every poll commits each partition up to
its oldest batch not yet acknowledged.

**The delivery contract** (the one statement of it; stage docs refer here):

* **At-least-once in, idempotent out.** A partition's offset is committed
  only after every record below it was handled: its outputs acknowledged by
  the :class:`~mongomem.stages.runtime.ports.Publisher` (Kafka: ``acks=all``,
  idempotent producer) or stored, or the record dead-lettered with the dead
  letter acknowledged. A publish that is never acknowledged is never
  committed past.
* **Order.** Records of one partition are handled strictly in offset order
  (a stage may run different keys of one batch side by side, never one key
  out of order); partitions go side by side.
* **What a crash repeats.** A SIGKILL (or any crash, a lost partition, a
  stop cut short after :data:`~mongomem.stages.runtime.process.DRAIN_TIMEOUT_S`)
  repeats at most the records after the last commit: each at most once per
  crash, in order. Every sink is idempotent on them (deterministic ids,
  ledgers, conditional writes), so a repeat changes nothing. Nothing
  acknowledged to a stage's input is ever skipped.
* **Failures** follow :class:`~mongomem.stages.runtime.retry.RetryPolicy`:
  an outage (a retriable storage or broker error) is retried with capped
  back-off (30 s cap, jitter) for as long as it lasts; another retriable
  error up to ``max_attempts``; a permanent error (bad input, a document
  MongoDB refuses for good) is dead-lettered once through :func:`dead_letter`
  (counted in ``mongomem_dead_letters_total``), never retried forever;
  configuration errors stop the stage without committing. This holds for a
  ``handle`` that raises and for a ``submit`` that raises alike (the batch,
  or its records one by one, is submitted again, so a submit that raises
  must leave nothing half-sent that a repeat would reorder — a stage that
  cannot promise it reports the failure through the acknowledgement
  instead).
* **Acknowledgement failures** of a pipelined stage are not retried in
  place: the batches acknowledged before the failed one are committed,
  nothing after it is, and :func:`consume` raises the failure, ending the
  attempt; :func:`run_stage` restarts a retriable one from the last commit
  (the records after it are read again, as after a crash).
* **Rebalances.** A source whose partitions can be taken away tells the
  loop through :class:`~mongomem.stages.runtime.consume.Revocations` from its
  revocation callback: the partitions' batches in flight are awaited and
  what was acknowledged of them is committed before the callback returns;
  records of them polled before are not handled, and nothing of them is
  committed later by that loop (their new owner reads the rest again).
* **Stop.** SIGTERM and SIGINT stop gracefully: the batch in flight finishes
  and is committed (a pipelined stage's outstanding batches are all awaited
  and committed), then the stage closes; a back-off in progress is cut
  short (that partition is read again).

The watcher reads a change stream instead of a consumer group, on the same
loop: :class:`~mongomem.stages.watcher_source.ChangeStreamSource` is its
record source, whose commit stores the checkpoint (resume token and publish
marks) only for what Kafka acknowledged, and
:class:`~mongomem.stages.watcher_core.WatcherCore` its pipelined stage; the
same contract, with the change stream as the input. The windowing stage's
default engine runs on it too
(:class:`~mongomem.stages.windowing.consumer.WindowingCore`, with a source
whose commit flushes its changelog table first:
:class:`~mongomem.stages.windowing.consumer.ChangelogCommits`).

Modules: :mod:`.ports` (Protocols), :mod:`.retry`, :mod:`.consume`,
:mod:`.process`, :mod:`.kafka` (the aiokafka adapters: the only stage module
that imports aiokafka), :mod:`.memory` (the in-memory test double).
"""

from __future__ import annotations

from mongomem.stages.runtime.consume import (
    IN_FLIGHT,
    PublishedDeadLetters,
    Revocations,
    Stopped,
    consume,
    dead_letter,
    record_lag,
    unless_stopped,
    wait_or_stop,
)
from mongomem.stages.runtime.ports import (
    CheckpointStore,
    ConsumerStage,
    DeadLetterSink,
    Message,
    PartitionBatches,
    PartitionReader,
    PipelinedStage,
    Publisher,
    Record,
    RecordSource,
    Stage,
)
from mongomem.stages.runtime.process import DRAIN_TIMEOUT_S, run_stage, stop_on_signals, supervise
from mongomem.stages.runtime.retry import DEFAULT_CAP_S, Decision, RetryPolicy

__all__ = [
    "DEFAULT_CAP_S",
    "DRAIN_TIMEOUT_S",
    "IN_FLIGHT",
    "CheckpointStore",
    "ConsumerStage",
    "DeadLetterSink",
    "Decision",
    "Message",
    "PartitionBatches",
    "PartitionReader",
    "PipelinedStage",
    "PublishedDeadLetters",
    "Publisher",
    "Record",
    "RecordSource",
    "RetryPolicy",
    "Revocations",
    "Stage",
    "Stopped",
    "consume",
    "dead_letter",
    "record_lag",
    "run_stage",
    "stop_on_signals",
    "supervise",
    "unless_stopped",
    "wait_or_stop",
]
