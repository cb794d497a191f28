"""Encryption at rest of item payloads in encrypted spaces (SPEC H1).

A space is created encrypted or not, and that never changes. In an encrypted
space each item's *payload* — inputs, key texts (file summaries, compressed
texts), outputs, outcome, resolution comment, sentiment and feedback — is one
JSON document sealed with AES-256-GCM (``cryptography``), a fresh 96-bit nonce
per write, and the item's ``project_id``/``space_id``/``item_id`` as associated
data, so a ciphertext copied to another item or project does not open.

Not encrypted, because matching or listing needs them: ids, kind, agent id,
source ids (trace id, output part), timestamps, the names of the input
arguments, and the **embedding vectors** (an embedding can leak some of the
meaning of its text; protect the database accordingly). Space settings and
names are not encrypted either.

The key is ``MONGOMEM_SPACES_ENCRYPTION_KEY``: 32 bytes, base64 (standard or
url-safe). A space stores the key's fingerprint (``key_id``), so a wrong key
fails with a clear :class:`~pipeline.errors.ConfigError` instead of garbage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.errors import ConfigError
from pipeline.settings import SpacesSettings

__all__ = ["PayloadCipher", "SpacesSettings", "cipher_from"]


class PayloadCipher:
    """AES-256-GCM over JSON payloads, bound to where the payload lives."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigError(
                f"MONGOMEM_SPACES_ENCRYPTION_KEY must decode to 32 bytes, not {len(key)}"
            )
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(b"mongomem-space-key\x00" + key).hexdigest()[:16]

    @staticmethod
    def _aad(project_id: str, space_id: str, item_id: str) -> bytes:
        return "\x00".join((project_id, space_id, item_id)).encode()

    def seal(
        self, payload: dict[str, Any], *, project_id: str, space_id: str, item_id: str
    ) -> bytes:
        nonce = os.urandom(12)
        plain = json.dumps(payload, separators=(",", ":"), default=str).encode()
        return nonce + self._aead.encrypt(nonce, plain, self._aad(project_id, space_id, item_id))

    def open(
        self, sealed: bytes, *, project_id: str, space_id: str, item_id: str
    ) -> dict[str, Any]:
        try:
            plain = self._aead.decrypt(
                sealed[:12], sealed[12:], self._aad(project_id, space_id, item_id)
            )
        except InvalidTag as exc:
            raise ConfigError(
                f"item {item_id} of space {space_id} does not decrypt: wrong "
                "MONGOMEM_SPACES_ENCRYPTION_KEY or a tampered document"
            ) from exc
        value: dict[str, Any] = json.loads(plain)
        return value


def cipher_from(settings: SpacesSettings) -> PayloadCipher | None:
    """The configured cipher, or ``None`` when no key is set."""
    if settings.encryption_key is None:
        return None
    raw = settings.encryption_key.get_secret_value().strip()
    try:
        padded = raw.replace("-", "+").replace("_", "/") + "=" * (-len(raw) % 4)
        key = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError("MONGOMEM_SPACES_ENCRYPTION_KEY is not base64") from exc
    return PayloadCipher(key)
