"""A stage as a process: signals, graceful drain and the one supervise/restart loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from typing import Any

from mongomem.errors import MongomemError
from mongomem.settings import Settings
from mongomem.stages.runtime.consume import Stopped, wait_or_stop
from mongomem.stages.runtime.ports import Stage
from mongomem.stages.runtime.retry import RetryPolicy

__all__ = ["DRAIN_TIMEOUT_S", "RESTARTS", "run_stage", "stop_on_signals", "supervise"]

log = logging.getLogger("mongomem.stages.runtime")

#: How long a stopping stage may take to drain before it is cancelled.
DRAIN_TIMEOUT_S = 15.0
#: Back-off between restarts after retriable failures (1 s doubling, capped at 30 s).
RESTARTS = RetryPolicy(base_s=1.0, cap_s=30.0)
#: A run this long resets the restart back-off.
HEALTHY_RUN_S = 60.0

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_listening: list[asyncio.Event] = []


def _signalled(sig: signal.Signals) -> None:
    log.info("%s: stopping (draining what is in flight)", sig.name)
    for stop in list(_listening):
        stop.set()


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM or SIGINT while inside (several stages of one process
    may listen at once: a signal stops them all)."""
    loop = asyncio.get_running_loop()
    first = not _listening
    _listening.append(stop)
    if first:
        for sig in _SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, partial(_signalled, sig))
    try:
        yield
    finally:
        _listening.remove(stop)
        if not _listening:
            for sig in _SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)


async def _attempt(stage: Stage, stop: asyncio.Event, drain_timeout_s: float) -> None:
    """Run one attempt; after ``stop``, give it ``drain_timeout_s`` to drain, then cancel."""
    task = asyncio.create_task(stage.run(stop), name=stage.name)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            done, _ = await asyncio.wait([task], timeout=drain_timeout_s)
            if not done:
                log.warning(
                    "%s did not drain within %.0f s; cancelling it", stage.name, drain_timeout_s
                )
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
        await task
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def supervise(
    stage: Stage,
    stop: asyncio.Event,
    *,
    restarts: RetryPolicy = RESTARTS,
    on_restart: Callable[[str, MongomemError], Coroutine[Any, Any, None]] | None = None,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Run ``stage`` until ``stop``; restart it after a *retriable* failure.

    The only restart loop of a stage. A broker or database that is down at
    start, or away longer than a stage's own retries, costs a restart with
    capped back-off (``restarts``) instead of a crash: the stages'
    checkpoints make a restart safe. ``on_restart(name, error)`` is awaited
    before each restart (counted by :func:`mongomem.operations.restarts.record_restart`).
    Final errors (configuration, a rejected API key …) are raised. A stop
    during a back-off ends it at once.
    """
    attempt = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            await _attempt(stage, stop, drain_timeout_s)
            return
        except MongomemError as exc:
            if not exc.retriable:
                raise
            if stop.is_set():  # an outage while draining: what was not committed is read again
                log.warning(
                    "%s stopped during an outage (%s: %s)", stage.name, type(exc).__name__, exc
                )
                return
            if time.monotonic() - started > HEALTHY_RUN_S:
                attempt = 0  # it ran well for a while: back off afresh
            attempt += 1
            delay = restarts.delay(attempt)
            log.warning(
                "%s stopped on a retriable error (%s: %s); restarting in %.1fs",
                stage.name,
                type(exc).__name__,
                exc,
                delay,
            )
            if on_restart is not None:
                await on_restart(stage.name, exc)
            try:
                await wait_or_stop(stop, delay)
            except Stopped:
                return


async def run_stage(
    stage: Stage,
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    count_restarts: bool = True,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Run ``stage`` as a process would: until SIGTERM/SIGINT (or ``stop``), then drain.

    Owns the signals (both stop the stage gracefully: what is in flight is
    finished and committed, within ``drain_timeout_s``) and the restart loop
    (:func:`supervise`; restarts are counted in MongoDB unless
    ``count_restarts`` is false), and probes the dependency of an open outage
    until it answers, so its "back" line comes without traffic
    (:func:`~mongomem.stages.runtime.outages.watch_outages`).
    """
    from mongomem.operations.restarts import record_restart
    from mongomem.stages.runtime.outages import probes_for, watch_outages

    stop = stop or asyncio.Event()
    counted = partial(record_restart, settings) if count_restarts else None
    probing = asyncio.Event()
    watcher = asyncio.create_task(watch_outages(probes_for(settings), probing))
    try:
        with stop_on_signals(stop):
            await supervise(stage, stop, on_restart=counted, drain_timeout_s=drain_timeout_s)
    finally:
        probing.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
