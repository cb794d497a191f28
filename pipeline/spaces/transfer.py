"""Export and import of a space's contents (SPEC H9): backup, review, moving tenants.

The format is JSON lines, UTF-8, one JSON object per line:

* line 1, the header: ``{"format": "mongomem.space", "version": 1, "items": N,
  "space": {space_id, name, description, kind, encrypted, keys, recall, agents,
  embedder, dimensions}}``;
* then ``N`` item lines: ``{"item": {item_id, kind, inputs, key_texts, outputs,
  outcome, resolution, sentiment, feedback, source, agent_id, created_at,
  updated_at}, "vectors": {argument: [float, ...]}}``.

An export is **plain text even for an encrypted space** (it is meant for
review and for moving data); protect the file. ``items`` lets an import
detect a truncated file.

Import creates a new space in the importing project (never merges into an
existing one), with the exported settings; ``encrypted`` may be chosen anew.
Vectors are **kept** when the file was embedded by the same embedder (name
and dimensions) as the importing process, and otherwise **re-embedded** from
the stored key texts (file summaries and compressed texts included, so no
LLM call is needed); ``reembed="always"`` forces it. Every line is validated
before anything is written; item ids are new (derived from the target
project, space and old id). The space is written first, then its items in
one ``insert_many``; if that fails the space is deleted again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from mongomem.errors import ConfigError, InputError, MongomemError, StateConflict
from mongomem.models import stable_id
from mongomem.spaces.base import SpacesBase
from mongomem.spaces.catalog import check_id, check_keys, check_recall, space_document
from mongomem.spaces.matching import embed_texts
from mongomem.spaces.models import SearchKey, Space, SpaceItem, validated
from mongomem.spaces.store import Vectors

__all__ = ["FORMAT", "VERSION", "TransferCalls"]

FORMAT = "mongomem.space"
VERSION = 1
_SPACE_FIELDS = (
    "space_id",
    "name",
    "description",
    "kind",
    "encrypted",
    "recall",
    "embedder",
    "dimensions",
)


def _line(text: str, n: int) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"line {n + 1} is not JSON: {exc}", field=f"lines.{n}") from exc
    if not isinstance(value, dict):
        raise InputError(f"line {n + 1} is not a JSON object", field=f"lines.{n}")
    return value


class TransferCalls(SpacesBase):
    """Export a space to JSON lines; import JSON lines as a new space."""

    async def export_space(self, space_id: str) -> list[str]:
        """The space and all of its items as JSON lines (header first)."""
        space = await self._space(space_id)
        store, _ = await self._ready()
        rows = await store.find_items(self.project_id, space)
        head = space.model_dump(mode="json", include=set(_SPACE_FIELDS))
        head["keys"] = [k.model_dump() for k in space.keys]
        head["agents"] = [
            {"agent_id": a, "keys": None if k is None else [x.model_dump() for x in k]}
            for a, k in sorted(space.agents.items())
        ]
        lines = [
            json.dumps(
                {"format": FORMAT, "version": VERSION, "items": len(rows), "space": head},
                ensure_ascii=False,
            )
        ]
        for item, vectors in rows:
            body = item.model_dump(mode="json", exclude={"space_id"})
            lines.append(json.dumps({"item": body, "vectors": vectors}, ensure_ascii=False))
        return lines

    async def import_space(
        self,
        lines: Iterable[str],
        *,
        space_id: str | None = None,
        encrypted: bool | None = None,
        reembed: Literal["auto", "always"] = "auto",
    ) -> Space:
        """A new space of this project from an export (see the module docstring)."""
        texts = [t for t in lines if t.strip()]
        if not texts:
            raise InputError("the export is empty", field="lines")
        header = _line(texts[0], 0)
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise InputError(f"line 1 is not a {FORMAT} v{VERSION} header", field="lines.0")
        head = header.get("space")
        if not isinstance(head, dict):
            raise InputError("the header has no space", field="lines.0.space")
        if header.get("items") != len(texts) - 1:
            raise InputError(
                f"the header announces {header.get('items')} items, the file has "
                f"{len(texts) - 1}: it is truncated or edited",
                field="lines",
            )
        if reembed not in ("auto", "always"):
            raise InputError("reembed must be 'auto' or 'always'", field="reembed")
        target = check_id(space_id if space_id is not None else head.get("space_id"), "space_id")
        secret = head.get("encrypted") if encrypted is None else encrypted
        if not isinstance(secret, bool):
            raise InputError("encrypted must be true or false", field="encrypted")
        if secret and self._keys.current is None:  # as create_space: a 409, not a 500
            raise StateConflict(
                "an encrypted space needs a key, and this deployment has none: set "
                "MONGOMEM_SPACES_ENCRYPTION_KEY (32 bytes, base64), or import it unencrypted",
                field="encrypted",
            )
        now = self.clock()
        try:
            space = Space(
                project_id=self.project_id,
                space_id=target,
                name=head["name"],
                description=head.get("description", ""),
                kind=head["kind"],
                encrypted=secret,
                keys=check_keys(head.get("keys"), "lines.0.space.keys"),
                recall=check_recall(head.get("recall") or {}),
                agents=self._agents(head),
                embedder=str(head["embedder"]),
                dimensions=int(head["dimensions"]),
                created_at=now,
                updated_at=now,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"the header's space is invalid: {exc}", field="lines.0.space"
            ) from exc
        rows = [self._item(_line(t, n), n, space) for n, t in enumerate(texts[1:], start=1)]
        store, embedder = await self._ready()
        if await store.get_space(self.project_id, target) is not None:
            raise StateConflict(
                f"space {target!r} already exists in this project", field="space_id"
            )
        same = embedder.name == space.embedder and embedder.dimensions == space.dimensions
        if reembed == "always" or not same:
            rows = [(item, await embed_texts(embedder, item.key_texts)) for item, _ in rows]
        cipher = store.keys.current if secret else None
        if secret and cipher is None:
            raise ConfigError("an encrypted space needs MONGOMEM_SPACES_ENCRYPTION_KEY")
        space = space.model_copy(
            update={
                "embedder": embedder.name,
                "dimensions": embedder.dimensions,
                "key_id": cipher.key_id if cipher is not None else None,
            }
        )
        docs = [store.item_document(self.project_id, space, i, v) for i, v in rows]
        await store.insert_space(space_document(space))
        try:
            await store.insert_items(docs)
        except MongomemError:
            await store.delete_space(self.project_id, target)
            raise
        return space.model_copy(update={"item_count": len(docs)})

    @staticmethod
    def _agents(head: dict[str, Any]) -> dict[str, tuple[SearchKey, ...] | None]:
        agents: dict[str, tuple[SearchKey, ...] | None] = {}
        for n, entry in enumerate(head.get("agents") or []):
            where = f"lines.0.space.agents.{n}"
            agent = check_id(entry.get("agent_id") if isinstance(entry, dict) else None, where)
            keys = entry.get("keys")
            agents[agent] = None if keys is None else check_keys(keys, f"{where}.keys")
        return agents

    def _item(self, line: dict[str, Any], n: int, space: Space) -> tuple[SpaceItem, Vectors]:
        body, vectors = line.get("item"), line.get("vectors")
        if not isinstance(body, dict) or not isinstance(vectors, dict):
            raise InputError(f"line {n + 1} needs 'item' and 'vectors'", field=f"lines.{n}")
        old_id = check_id(body.get("item_id"), f"lines.{n}.item.item_id")
        new_id = stable_id("item", self.project_id, space.space_id, old_id)
        item = validated(
            SpaceItem,
            {**body, "item_id": new_id, "space_id": space.space_id},
            prefix=f"lines.{n}.item",
        )
        if item.kind != space.kind:
            raise InputError(f"line {n + 1} is a {item.kind} item", field=f"lines.{n}.item.kind")
        clean: Vectors = {}
        for arg, vec in vectors.items():
            if (
                arg not in item.key_texts
                or not isinstance(vec, list)
                or len(vec) != space.dimensions
            ):
                raise InputError(
                    f"line {n + 1}: bad vector for {arg!r}", field=f"lines.{n}.vectors"
                )
            clean[arg] = [float(x) for x in vec]
        if set(clean) != set(item.key_texts):
            raise InputError(
                f"line {n + 1}: vectors do not match the key texts", field=f"lines.{n}.vectors"
            )
        return item, clean
