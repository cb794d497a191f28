"""The windowing stage's ports: the session table, the sinks, and per-project policies.

:class:`~mongomem.stages.windowing.windower.SnapshotWindower` reaches the outside only
through these. The stage plugs in a changelog-backed table
(:class:`~mongomem.stages.windowing.consumer.ChangelogTable`, or a faust table) and the
MongoDB + Kafka publisher (:mod:`mongomem.stages.windowing.sinks`); tests plug in
:class:`DictWindowStore` and recording sinks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Protocol, runtime_checkable

from mongomem.models import SessionKey, Snapshot
from mongomem.project_config import WindowingConfig
from mongomem.settings import WindowingSettings
from mongomem.stages.runtime.ports import DeadLetterSink
from mongomem.stages.windowing.logic import WindowPolicy, WindowState

__all__ = [
    "BulkSnapshotSink",
    "DeadLetterSink",
    "DictWindowStore",
    "ErasureCheck",
    "Policies",
    "ResumePoints",
    "SnapshotSink",
    "WindowStore",
]


class WindowStore(Protocol):
    """Session key → window state (the faust table, or a dict in tests)."""

    def get(self, key: bytes) -> WindowState | None: ...

    def put(self, key: bytes, state: WindowState) -> None: ...

    def delete(self, key: bytes) -> None:
        """Forget a (retired) session; nothing if it is not there."""

    def items(self) -> Iterable[tuple[bytes, WindowState]]: ...


class ResumePoints(Protocol):
    """Where a session that the table does not know resumes (MongoDB's ``snapshots``)."""

    async def last_promoted(self, sessions: Mapping[SessionKey, int]) -> dict[SessionKey, int]:
        """Per session, the last seq passed over before the seq it maps to (0: none).

        ``sessions`` maps each session to the first seq about to be applied to
        it. The answer is the largest ``last_seq`` of its snapshots, or the seq
        of a later session end (``end_session``) below the mapped seq.
        """
        ...


class ErasureCheck(Protocol):
    """Which sessions are erased (:class:`~mongomem.erasure.register.ErasureRegister`)."""

    async def erased_among(self, sessions: Iterable[SessionKey]) -> set[SessionKey]: ...


class SnapshotSink(Protocol):
    async def deliver(self, snapshot: Snapshot) -> None:
        """Store and publish ``snapshot``; idempotent (the id is deterministic)."""


@runtime_checkable
class BulkSnapshotSink(SnapshotSink, Protocol):
    """A sink that can also deliver many snapshots at once (fewer round trips)."""

    async def deliver_many(self, snapshots: Sequence[Snapshot]) -> None:
        """Like :meth:`deliver` for each, one session's in the given order; returns when all are."""


class DictWindowStore:
    """A :class:`WindowStore` on a dict: the test double, and the faust table's cache."""

    def __init__(self) -> None:
        self.data: dict[bytes, WindowState] = {}

    def get(self, key: bytes) -> WindowState | None:
        return self.data.get(key)

    def put(self, key: bytes, state: WindowState) -> None:
        self.data[key] = state

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterable[tuple[bytes, WindowState]]:
        return list(self.data.items())


class Policies:
    """Window policy per project: settings give defaults, ``project-config.yaml`` overrides."""

    def __init__(self, defaults: WindowingSettings, config: WindowingConfig | None = None) -> None:
        self._defaults = defaults
        self._config = config or WindowingConfig()
        self._cache: dict[str, WindowPolicy] = {}

    @property
    def retirement_scan_period(self) -> timedelta | None:
        """How often (event time) a partition's sessions are checked against their TTL."""
        ttl = self._defaults.state_ttl_s
        return None if ttl is None else timedelta(seconds=ttl / 8)

    def for_project(self, project_id: str) -> WindowPolicy:
        policy = self._cache.get(project_id)
        if policy is None:
            cfg = self._config
            override = cfg.projects.get(project_id)
            max_messages = self._defaults.max_messages
            idle = self._defaults.idle_timeout_s
            ttl = self._defaults.state_ttl_s
            for layer in (cfg, override):
                if layer is not None and layer.max_messages is not None:
                    max_messages = layer.max_messages
                if layer is not None and layer.idle_timeout_s is not None:
                    idle = layer.idle_timeout_s
            policy = self._cache[project_id] = WindowPolicy.of(max_messages, idle, ttl)
        return policy
