"""Re-sealing an encrypted space under the current key (key rotation, SPEC H1).

:meth:`RekeyCalls.rekey_space` moves every item of a space that is not yet
under ``MONGOMEM_SPACES_ENCRYPTION_KEY`` to it, then records that key as the
space's ``key_id``. The old key must still be configured (as one of
``MONGOMEM_SPACES_PREVIOUS_ENCRYPTION_KEYS``) to open what it sealed; see
:mod:`mongomem.spaces.crypto` for the whole rotation.

What it guarantees, without transactions:

* **Each item is one single-document write.** Its ciphertext and its key's
  fingerprint change together, so a concurrent reader sees the item under
  the old key or the new one, both readable, never a mixture.
* **A concurrent write wins.** The re-sealed ciphertext replaces the old one
  only if the item still holds the ciphertext that was opened (a
  compare-and-swap; every seal has a fresh nonce): an item rewritten in the
  meantime keeps the new write, which is already under the current key when
  its writer has it; an item deleted in the meantime stays deleted.
* **Idempotent and resumable.** Only items not marked with the current key
  are read, so a rekey that was interrupted is completed by running it again,
  and one that finished re-seals nothing. The space's ``key_id`` changes only
  after no item is left under another key (until then, items that carry no
  fingerprint of their own are still opened with the old one).
* Items written under an old key *during* the run (by a process that still
  has it as its current key) are swept up by another pass; if they keep
  coming, the rekey stops with a :class:`~mongomem.errors.ConfigError` naming
  that key, and the space keeps its old ``key_id``.
"""

from __future__ import annotations

from mongomem.adapters.mongo import Document
from mongomem.errors import ConfigError, StateConflict
from mongomem.spaces.base import SpacesBase
from mongomem.spaces.crypto import PayloadCipher
from mongomem.spaces.models import RekeyResult, Space
from mongomem.spaces.store import SpaceStore

__all__ = ["BATCH", "PASSES", "RekeyCalls"]

#: Items read per query while re-sealing.
BATCH = 100
#: Passes over the space before items still under another key are an error.
PASSES = 3


class RekeyCalls(SpacesBase):
    """Re-seal a space's items under the current key."""

    async def rekey_space(self, space_id: str) -> RekeyResult:
        """Re-seal every item of the encrypted space that is not under the current key,
        then make that key the space's (see the module docstring)."""
        space = await self._space(space_id)
        if not space.encrypted:
            raise StateConflict(
                f"space {space.space_id!r} is not encrypted: it has no key to rotate",
                field="space_id",
            )
        store, _ = await self._ready()
        sealer = store.keys.sealer()
        resealed = 0
        for _ in range(PASSES):
            resealed += await self._reseal_pass(store, space, sealer)
            left = await store.items_not_under(
                self.project_id, space.space_id, sealer.key_id, after=None, limit=1
            )
            if not left:
                break
        else:
            other = left[0].get("key_id") or space.key_id
            raise ConfigError(
                f"items of space {space.space_id!r} are still being sealed under key {other}: "
                "a process still has it as MONGOMEM_SPACES_ENCRYPTION_KEY; give every process "
                f"the current key ({sealer.key_id}), then run the rekey again"
            )
        if space.key_id != sealer.key_id:
            await store.set_space(self.project_id, space.space_id, {"key_id": sealer.key_id})
        count = await store.count_items(self.project_id, space.space_id)
        done = space.model_copy(update={"key_id": sealer.key_id, "item_count": count})
        return RekeyResult(space=done, resealed=resealed)

    async def _reseal_pass(self, store: SpaceStore, space: Space, sealer: PayloadCipher) -> int:
        """One pass over the space's items by id; how many were re-sealed."""
        resealed, after = 0, None
        while batch := await store.items_not_under(
            self.project_id, space.space_id, sealer.key_id, after=after, limit=BATCH
        ):
            for doc in batch:
                resealed += await self._reseal(store, space, doc, sealer)
            after = batch[-1]["_id"]
        return resealed

    @staticmethod
    async def _reseal(store: SpaceStore, space: Space, doc: Document, sealer: PayloadCipher) -> int:
        payload = store.open_payload(space, doc)
        sealed = sealer.seal(
            payload, project_id=doc["project_id"], space_id=doc["space_id"], item_id=doc["_id"]
        )
        return int(await store.reseal_item(doc, sealed, sealer.key_id))
