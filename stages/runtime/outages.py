"""Probes that end an outage when its dependency is back, with no traffic at all.

An outage's "back" line (:mod:`mongomem.logs`) is told when work that needed the
dependency succeeds. An idle stage does no such work: without a probe, its
outage stayed open, and the "back" line came with the next record, minutes or
hours later (issue 25). While an outage is open (:func:`mongomem.logs.open_outages`),
:func:`watch_outages` asks the dependency itself every :data:`PROBE_INTERVAL_S`:

* Kafka — a client bootstraps from ``MONGOMEM_KAFKA_BOOTSTRAP``: a metadata
  request a broker answered, not merely an open port;
* MongoDB — the ``ping`` command, within :data:`PROBE_TIMEOUT_S`.

The first answer ends the outage with its one line
(:func:`mongomem.logs.dependency_ok`). Nothing is probed while all is well, so
a healthy stage pays nothing. A probe never raises: a failed one is the outage
going on (what its client logs on the way is counted by the outage's log).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

from mongomem.logs import dependency_ok, open_outages
from mongomem.settings import MongoSettings, Settings

__all__ = [
    "PROBE_INTERVAL_S",
    "PROBE_TIMEOUT_S",
    "Probe",
    "probe_mongodb",
    "probes_for",
    "watch_outages",
]

#: How often an open outage's dependency is asked whether it is back.
PROBE_INTERVAL_S = 2.0
#: How long one probe waits for its answer.
PROBE_TIMEOUT_S = 3.0

#: Whether the dependency answers now (never raises).
Probe = Callable[[], Awaitable[bool]]


async def probe_mongodb(settings: MongoSettings, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the server of ``settings.uri`` answers ``ping`` within ``timeout_s``."""
    if not settings.uri:
        return False
    from mongomem.adapters.mongo import connect

    try:
        client = connect(settings.model_copy(update={"server_selection_timeout_s": timeout_s}))
    except Exception:  # a bad URI is no answer either (the stage says why)
        return False
    try:
        await asyncio.wait_for(client.admin.command("ping"), timeout_s + 1)
    except Exception:  # any failure is the outage going on
        return False
    else:
        return True
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def probes_for(settings: Settings) -> dict[str, Probe]:
    """The probe of each dependency the outage log names (``"Kafka"``, ``"MongoDB"``)."""
    from mongomem.stages.runtime.kafka import probe_kafka  # aiokafka: where stages use it

    return {
        "Kafka": lambda: probe_kafka(settings.kafka),
        "MongoDB": lambda: probe_mongodb(settings.mongodb),
    }


async def watch_outages(
    probes: Mapping[str, Probe],
    stop: asyncio.Event,
    *,
    interval_s: float = PROBE_INTERVAL_S,
) -> None:
    """Until ``stop``: every ``interval_s``, probe each dependency of an open outage;
    one that answers ends its outage ("… is back after …")."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
        if stop.is_set():
            return
        for dependency in sorted(open_outages()):
            probe = probes.get(dependency)
            if probe is not None and await probe():
                dependency_ok(dependency)
