"""The keyring of encrypted spaces: keys are picked by fingerprint, only the current one
seals, and a key that is missing or malformed is named (no servers)."""

from __future__ import annotations

import base64

import pytest

from mongomem.errors import ConfigError
from mongomem.spaces import Keyring, PayloadCipher, SpacesSettings
from mongomem.spaces.crypto import keyring_from

A, B, C = bytes(range(32)), bytes(32), bytes([7] * 32)
WHERE = {"project_id": "p", "space_id": "s", "item_id": "i"}


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_the_current_key_seals_and_every_key_opens_by_fingerprint() -> None:
    ring = keyring_from(SpacesSettings(encryption_key=b64(B), previous_encryption_keys=b64(A)))
    old, new = PayloadCipher(A), PayloadCipher(B)
    assert ring.sealer().key_id == new.key_id
    sealed = old.seal({"a": 1}, **WHERE)
    assert ring.opener(old.key_id, sealed="x").open(sealed, **WHERE) == {"a": 1}
    assert ring.opener(None, sealed="x").key_id == new.key_id  # no fingerprint: the current key


def test_a_key_that_is_not_configured_is_named() -> None:
    ring = Keyring(PayloadCipher(B), [PayloadCipher(A)])
    lost = PayloadCipher(C).key_id
    with pytest.raises(ConfigError) as missing:
        ring.opener(lost, sealed="item i of space 's'")
    assert str(missing.value).startswith(f"item i of space 's' is sealed under key {lost}")
    assert "MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS" in str(missing.value)
    with pytest.raises(ConfigError, match="set MONGOMEM_SPACES_ENCRYPTION_KEY to read or write"):
        Keyring(None).opener(lost, sealed="x")


def test_previous_keys_never_seal() -> None:
    ring = keyring_from(SpacesSettings(previous_encryption_keys=f"{b64(A)}, {b64(B)}"))
    assert ring.current is None
    assert ring.opener(PayloadCipher(B).key_id, sealed="x").key_id == PayloadCipher(B).key_id
    with pytest.raises(ConfigError, match="set MONGOMEM_SPACES_ENCRYPTION_KEY to write"):
        ring.sealer()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (f"{b64(A)},not base64!", "ENCRYPTION_KEYS entry 2 is not base64"),
        (b64(b"short"), "ENCRYPTION_KEYS entry 1 must decode to 32 bytes, not 5"),
    ],
)
def test_bad_previous_keys_name_the_entry(entries: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        keyring_from(SpacesSettings(previous_encryption_keys=entries))
