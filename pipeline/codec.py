"""The one place where messages become Kafka bytes and back.

Every message is a JSON envelope ``{"kind": ..., "v": ..., "data": {...}}``.
``kind`` names the model, ``v`` its schema version. Decoding checks both and
validates ``data``; anything else is a :class:`MessageDecodeError` carrying
the reason, never a crash, so a consumer can send the raw bytes to its
dead-letter topic and go on.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mongomem.errors import MessageDecodeError
from mongomem.models import MemoryCandidate, SessionEnd, Snapshot, Turn, Watermark

__all__ = ["SCHEMA_VERSION", "decode", "encode", "kind_of", "peek_kind", "register"]

SCHEMA_VERSION = 1

M = TypeVar("M", bound=BaseModel)

_KINDS: dict[str, type[BaseModel]] = {}
_NAMES: dict[type[BaseModel], str] = {}


def register(kind: str, model: type[BaseModel]) -> None:
    """Make ``model`` encodable under ``kind``. Stage-local message types use this."""
    existing = _KINDS.get(kind)
    if existing is not None and existing is not model:
        raise ValueError(f"message kind {kind!r} is already registered for {existing.__name__}")
    _KINDS[kind] = model
    _NAMES[model] = kind


register("turn", Turn)
register("snapshot", Snapshot)
register("candidate", MemoryCandidate)
register("watermark", Watermark)
register("session-end", SessionEnd)


def kind_of(model: type[BaseModel]) -> str:
    try:
        return _NAMES[model]
    except KeyError:
        raise TypeError(f"{model.__name__} is not a registered message kind") from None


def encode(message: BaseModel) -> bytes:
    """Encode a registered model as envelope bytes."""
    envelope = {
        "kind": kind_of(type(message)),
        "v": SCHEMA_VERSION,
        "data": message.model_dump(mode="json"),
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


def decode(raw: bytes | None, expected: type[M]) -> M:
    """Decode envelope bytes into ``expected``, or raise :class:`MessageDecodeError`."""
    if raw is None:
        raise MessageDecodeError("empty message (tombstone)")
    try:
        envelope: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageDecodeError(f"not a JSON envelope: {exc}") from exc
    if not isinstance(envelope, dict):
        raise MessageDecodeError("envelope must be a JSON object")
    kind, version = envelope.get("kind"), envelope.get("v")
    want = kind_of(expected)
    if kind != want:
        raise MessageDecodeError(f"expected a {want!r} message, got kind {kind!r}")
    if version != SCHEMA_VERSION:
        raise MessageDecodeError(
            f"{want!r} schema version {version!r} is not supported (this build reads "
            f"{SCHEMA_VERSION})"
        )
    try:
        return expected.model_validate(envelope.get("data"))
    except ValidationError as exc:
        raise MessageDecodeError(f"invalid {want!r} message: {exc}") from exc


def peek_kind(raw: bytes | None) -> str | None:
    """The envelope's kind, or ``None`` when the bytes are not an envelope."""
    if raw is None:
        return None
    try:
        envelope = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    kind = envelope.get("kind") if isinstance(envelope, dict) else None
    return kind if isinstance(kind, str) else None
