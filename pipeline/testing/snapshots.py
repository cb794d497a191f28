"""Build valid :class:`~mongomem.models.Snapshot` events for tests and demos."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from mongomem.models import Role, SessionKey, Snapshot, SnapshotTurn, Turn

__all__ = ["make_snapshot"]


def make_snapshot(
    turns: Sequence[tuple[str, str]],
    *,
    project_id: str = "proj",
    user_id: str = "user-1",
    session_id: str = "session-1",
    first_seq: int = 1,
    start: datetime | None = None,
) -> Snapshot:
    """A snapshot of ``(role, content)`` turns numbered from ``first_seq``, one second apart."""
    start = start or datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    session = SessionKey(project_id=project_id, user_id=user_id, session_id=session_id)
    body = tuple(
        SnapshotTurn(
            turn_id=Turn.make_id(project_id, user_id, session_id, first_seq + i),
            seq=first_seq + i,
            role=Role(role),
            content=content,
            created_at=start + timedelta(seconds=i),
        )
        for i, (role, content) in enumerate(turns)
    )
    last_seq = first_seq + len(body) - 1
    return Snapshot(
        snapshot_id=Snapshot.make_id(session, first_seq, last_seq),
        project_id=project_id,
        user_id=user_id,
        session_id=session_id,
        first_seq=first_seq,
        last_seq=last_seq,
        turns=body,
        reason="count",
        closed_at=start + timedelta(seconds=len(body)),
    )
