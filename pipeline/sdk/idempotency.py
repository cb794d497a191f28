"""Idempotency keys of direct saves: which keys are valid, and what a key stands for.

A save made with ``idempotency_key`` gets its candidate id from
:func:`keyed_candidate_id` instead of a random one. The reconciler's ledger
(:mod:`mongomem.ltm.store`) keys its entries by candidate id, so a retry of
that save is recognised and answered with the first call's outcome: same
action, same memory and version ids, nothing counted twice.

* **Scope.** A key is one request of one caller for one memory type: the id is
  derived from (project, the caller's user id, memory type, key). Two users, or
  two types, never share a key — taxonomic terms included, though they live in
  the project scope. Service-account callers (SPEC F1) share their account's
  keys.
* **Same key, different request.** The ledger entry keeps
  :func:`request_fingerprint` (the memory type and the trimmed fields); a
  repeat with another fingerprint raises :class:`~mongomem.errors.InputError`
  with ``field="idempotency_key"`` (HTTP 422) and stores nothing. The session
  id is not part of the request: a retry from another session is a retry.
* **Lifetime.** A key is remembered for ``MONGOMEM_RECONCILE_LEDGER_TTL_S``
  (default 30 days; ``none``: forever) after its save settled: a repeat within
  that time is answered as above; a later one is a new save, planned afresh
  (the same request then typically reinforces what the first saved, without
  counting twice; a different one is accepted). Keep the TTL longer than any
  client retries.
* **Valid keys** are 1–255 characters of ``A–Z a–z 0–9`` and ``- _ . : ~ + / =``
  (UUIDs, ULIDs, base64 and ``namespace:id`` forms all fit).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from mongomem.errors import InputError
from mongomem.models import stable_id
from mongomem.sdk.identity import Identity

__all__ = [
    "IDEMPOTENCY_KEY_MAX_LENGTH",
    "check_idempotency_key",
    "keyed_candidate_id",
    "request_fingerprint",
]

IDEMPOTENCY_KEY_MAX_LENGTH = 255
_KEY = re.compile(r"[A-Za-z0-9_.:~+/=-]+")


def check_idempotency_key(key: object) -> str:
    """``key`` if it is a valid idempotency key, else :class:`InputError` naming the field."""
    if not isinstance(key, str):
        raise InputError("idempotency_key must be a string", field="idempotency_key")
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH:
        raise InputError(
            f"idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} characters",
            field="idempotency_key",
        )
    if _KEY.fullmatch(key) is None:
        raise InputError(
            "idempotency_key may contain only letters, digits and - _ . : ~ + / =",
            field="idempotency_key",
        )
    return key


def keyed_candidate_id(who: Identity, memory_type: str, key: str) -> str:
    """The candidate id of a save made by ``who`` with idempotency key ``key``."""
    return stable_id("cand", "direct-key", who.project_id, who.user_id, memory_type, key)


def request_fingerprint(memory_type: str, fields: Mapping[str, str]) -> str:
    """What a keyed save asked for, as a hash: the memory type and the (trimmed) fields."""
    return stable_id("req", memory_type, json.dumps(dict(fields), sort_keys=True))
