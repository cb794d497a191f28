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
url-safe). Every sealed item stores the fingerprint (``key_id``) of the key
that sealed it, and the space stores the one its items are all under; items
written before items carried it have only the space's. A :class:`Keyring`
picks the key to open an item by that fingerprint, never by trying keys, so
a key that is not configured fails with a :class:`~mongomem.errors.ConfigError`
naming its fingerprint instead of garbage.

Rotating the key: make the new key ``MONGOMEM_SPACES_ENCRYPTION_KEY`` and the
old one a ``MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS`` entry in every process;
items under the old key stay readable, every write seals under the new one.
``mongomem spaces rekey`` (:mod:`mongomem.spaces.rekey`) then re-seals a
space's remaining items; once every space is rekeyed the old key can go.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mongomem.errors import ConfigError
from mongomem.settings import SpacesSettings

__all__ = ["Keyring", "PayloadCipher", "SpacesSettings", "cipher_from", "keyring_from"]


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


class Keyring:
    """The keys of encrypted spaces by fingerprint: the ``current`` one seals, all of them open.

    ``current`` is ``MONGOMEM_SPACES_ENCRYPTION_KEY`` (``None`` when unset);
    ``previous`` are ``MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS``, kept to open
    what they sealed and never used to seal.
    """

    def __init__(
        self, current: PayloadCipher | None, previous: Sequence[PayloadCipher] = ()
    ) -> None:
        self.current = current
        self._by_id = {c.key_id: c for c in previous}
        if current is not None:
            self._by_id[current.key_id] = current

    def sealer(self) -> PayloadCipher:
        """The current key: every write seals under it."""
        if self.current is None:
            raise ConfigError(
                "this space is encrypted: set MONGOMEM_SPACES_ENCRYPTION_KEY to write it"
            )
        return self.current

    def opener(self, key_id: str | None, *, sealed: str) -> PayloadCipher:
        """The key whose fingerprint is ``key_id`` (``None``: the current key); ``sealed``
        names what it sealed, for the error when that key is not configured."""
        if not self._by_id:
            raise ConfigError(
                "this space is encrypted: set MONGOMEM_SPACES_ENCRYPTION_KEY to read or write it"
            )
        cipher = self.sealer() if key_id is None else self._by_id.get(key_id)
        if cipher is None:
            current = self.current.key_id if self.current is not None else "unset"
            raise ConfigError(
                f"{sealed} is sealed under key {key_id}, which is not the key of "
                f"MONGOMEM_SPACES_ENCRYPTION_KEY ({current}) nor one of "
                "MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS: configure that key to read it"
            )
        return cipher


def _key(raw: str, setting: str) -> bytes:
    raw = raw.strip()
    try:
        padded = raw.replace("-", "+").replace("_", "/") + "=" * (-len(raw) % 4)
        key = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{setting} is not base64") from exc
    if len(key) != 32:
        raise ConfigError(f"{setting} must decode to 32 bytes, not {len(key)}")
    return key


def cipher_from(settings: SpacesSettings) -> PayloadCipher | None:
    """The configured cipher, or ``None`` when no key is set."""
    if settings.encryption_key is None:
        return None
    return PayloadCipher(
        _key(settings.encryption_key.get_secret_value(), "MONGOMEM_SPACES_ENCRYPTION_KEY")
    )


def keyring_from(settings: SpacesSettings) -> Keyring:
    """The current key and the previous ones (each checked, naming the setting)."""
    previous = [
        PayloadCipher(
            _key(secret.get_secret_value(), f"MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS entry {n}")
        )
        for n, secret in enumerate(settings.previous_encryption_keys, start=1)
    ]
    return Keyring(cipher_from(settings), previous)
