"""Session buckets: the share of the turns stream a watcher owns (SPEC I1, scaling out).

Every turn (and session end) document carries ``bucket``
(:func:`session_bucket`), written by :mod:`mongomem.stm.turns`. Watcher ``k`` of
``N`` reads the documents whose ``bucket % N == k`` (:func:`share_filter`);
windowing applies that watcher's watermarks only to the sessions of its share
(:func:`in_share`). The bucket is a pure function of the session's ids, so
every process computes the same one, and it never changes.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["BUCKETS", "in_share", "session_bucket", "share_filter"]

#: Buckets a session can fall in; watcher shares are ``bucket % N``.
BUCKETS = 4096
#: Joins the ids: ids cannot contain control characters (``check_identifier``).
_SEPARATOR = "\x1f"


def session_bucket(project_id: str, user_id: str, session_id: str) -> int:
    """The session's bucket in ``[0, BUCKETS)``: blake2b of the ids, stable across processes."""
    joined = _SEPARATOR.join((project_id, user_id, session_id)).encode()
    digest = hashlib.blake2b(joined, digest_size=8, person=b"mongomem-bucket").digest()
    return int.from_bytes(digest, "big") % BUCKETS


def in_share(project_id: str, user_id: str, session_id: str, share: int, shares: int) -> bool:
    """Does share ``share`` of ``shares`` own this session? (One share owns every session.)"""
    if shares == 1:
        return True
    return session_bucket(project_id, user_id, session_id) % shares == share


def share_filter(share: int, shares: int, *, prefix: str = "") -> dict[str, Any]:
    """The MongoDB filter of share ``share`` of ``shares`` (``{}``: all, when ``shares`` is 1).

    Share 0 also owns the documents without a ``bucket`` (written before buckets
    existed). ``prefix`` is ``"fullDocument."`` inside a change stream's ``$match``.
    """
    if not 0 <= share < shares:
        raise ValueError(f"share {share} is not in [0, {shares})")
    if shares == 1:
        return {}
    field = f"{prefix}bucket"
    mine: dict[str, Any] = {field: {"$mod": [shares, share]}}
    if share:
        return mine
    return {"$or": [mine, {field: {"$exists": False}}]}
