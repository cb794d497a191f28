"""API keys of the memory service: every key opens exactly one project.

Two sources, checked in this order:

1. **Environment keys** for simple setups: ``MONGOMEM_SERVICE_API_KEYS`` is a
   comma list of ``<project_id>:<key>`` entries (split at the first ``:``).
   An entry without a project is refused at start — a key bound to no project
   could open any. They are hashed when the service starts, compared in
   constant time, and changed only by a restart.
2. **Managed keys** in the MongoDB collection ``api_keys``, created, listed
   and revoked while the service runs (``mongomem keys …``). A managed key
   reads ``mmk_<key_id>_<secret>``; the collection keeps ``_id = key_id``,
   the project, a name, the times, and the SHA-256 of the whole key — never
   the key. The plaintext is shown once, at creation. Every request looks its
   key up again (one read by ``_id``), so a revocation holds from the next
   request on.

A key of unknown shape never reaches MongoDB. Failures are
:class:`~mongomem.errors.AuthError` (the service answers 401); MongoDB being
away is :class:`~mongomem.errors.StorageError` (503).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, SecretStr
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import Document
from mongomem.errors import AuthError, ConfigError, InputError, StorageError
from mongomem.models import check_identifier, utcnow

__all__ = [
    "API_KEYS",
    "KEY_PREFIX",
    "ApiKeyInfo",
    "ApiKeyStore",
    "EnvKey",
    "KeyRing",
    "hash_key",
    "parse_env_keys",
]

API_KEYS = "api_keys"
KEY_PREFIX = "mmk_"
_MANAGED = re.compile(r"mmk_([0-9a-f]{16})_[A-Za-z0-9_-]{32,}")


def _presentable(key: str) -> bool:
    """Whether ``key`` can be a key at all: printable ASCII, no spaces (an HTTP token)."""
    return key.isascii() and key.isprintable() and " " not in key


def hash_key(key: str) -> str:
    """The SHA-256 hex digest stored for, and compared with, a key."""
    return hashlib.sha256(key.encode()).hexdigest()


class EnvKey(BaseModel):
    """One ``<project_id>:<key>`` entry of ``MONGOMEM_SERVICE_API_KEYS``, hashed."""

    model_config = ConfigDict(frozen=True)

    project_id: str
    digest: str


def parse_env_keys(entries: tuple[SecretStr, ...]) -> tuple[EnvKey, ...]:
    """The environment keys, or :class:`ConfigError` naming the bad entry by position."""
    out: list[EnvKey] = []
    for i, entry in enumerate(entries, start=1):
        project, sep, key = entry.get_secret_value().partition(":")
        try:
            project = check_identifier(project.strip())
        except ValueError as exc:
            raise ConfigError(
                f"MONGOMEM_SERVICE_API_KEYS entry {i}: the project id {exc} "
                "(entries read <project_id>:<key>)"
            ) from None
        if not sep or len(key.strip()) < 16:
            raise ConfigError(
                f"MONGOMEM_SERVICE_API_KEYS entry {i}: expected <project_id>:<key> with a key "
                "of at least 16 characters"
            )
        if not _presentable(key.strip()):
            raise ConfigError(
                f"MONGOMEM_SERVICE_API_KEYS entry {i}: a key is printable ASCII without spaces "
                "(it travels in an HTTP header)"
            )
        out.append(EnvKey(project_id=project, digest=hash_key(key.strip())))
    return tuple(out)


class ApiKeyInfo(BaseModel):
    """A managed key as listed: everything but the secret."""

    model_config = ConfigDict(frozen=True)

    key_id: str
    project_id: str
    name: str
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _utc(at: datetime | None) -> datetime | None:
    """BSON times are UTC; a client without ``tz_aware`` hands them back naive."""
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def _info(doc: Document) -> ApiKeyInfo:
    return ApiKeyInfo(
        key_id=doc["_id"],
        project_id=doc["project_id"],
        name=doc.get("name", ""),
        created_at=_utc(doc["created_at"]),
        revoked_at=_utc(doc.get("revoked_at")),
    )


class ApiKeyStore:
    """Managed keys in the ``api_keys`` collection of ``db``."""

    def __init__(self, db: AsyncDatabase[Document]) -> None:
        self._keys = db[API_KEYS]

    async def create(self, project_id: str, name: str = "") -> tuple[str, ApiKeyInfo]:
        """A new key for ``project_id``: its plaintext (shown once) and its listing."""
        try:
            project = check_identifier(project_id)
        except ValueError as exc:
            raise InputError(f"project_id {exc}", field="project_id") from None
        key_id = secrets.token_hex(8)
        key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        doc: Document = {
            "_id": key_id,
            "project_id": project,
            "name": name,
            "sha256": hash_key(key),
            "created_at": utcnow(),
            "revoked_at": None,
        }
        try:
            await self._keys.insert_one(doc)
        except PyMongoError as exc:
            raise StorageError(f"could not store the API key: {exc}") from exc
        return key, _info(doc)

    async def list_keys(self, project_id: str | None = None) -> list[ApiKeyInfo]:
        query: Document = {} if project_id is None else {"project_id": project_id}
        try:
            docs = await self._keys.find(query).sort([("created_at", 1), ("_id", 1)]).to_list()
        except PyMongoError as exc:
            raise StorageError(f"could not list the API keys: {exc}") from exc
        return [_info(d) for d in docs]

    async def revoke(self, key_id: str, at: datetime | None = None) -> ApiKeyInfo:
        """Revoke a key (idempotent: a revoked key keeps its first revocation time)."""
        try:
            await self._keys.update_one(
                {"_id": key_id, "revoked_at": None}, {"$set": {"revoked_at": at or utcnow()}}
            )
            doc = await self._keys.find_one({"_id": key_id})
        except PyMongoError as exc:
            raise StorageError(f"could not revoke the API key: {exc}") from exc
        if doc is None:
            raise InputError(f"there is no API key {key_id!r}", field="key_id")
        return _info(doc)

    async def project_of(self, key: str) -> str | None:
        """The project of an active managed key; ``None`` if it is not one."""
        match = _MANAGED.fullmatch(key)
        if match is None:
            return None
        try:
            doc = await self._keys.find_one({"_id": match.group(1)})
        except PyMongoError as exc:
            raise StorageError(f"could not check the API key: {exc}") from exc
        if doc is None or not hmac.compare_digest(str(doc.get("sha256", "")), hash_key(key)):
            return None
        if doc.get("revoked_at") is not None:
            raise AuthError("this API key has been revoked")
        return str(doc["project_id"])


class KeyRing:
    """Decides which project a presented key opens (environment keys, then managed keys)."""

    def __init__(self, env_keys: tuple[EnvKey, ...], store: ApiKeyStore | None) -> None:
        self._env = env_keys
        self._store = store

    async def project_of(self, key: str | None) -> str:
        """The key's project, or :class:`AuthError`."""
        if not key:
            raise AuthError("no API key: send 'Authorization: Bearer <key>'")
        if not _presentable(key):  # non-ASCII, control bytes: no key of ours looks like that
            raise AuthError("unknown API key")
        digest = hash_key(key)
        found = None
        for env in self._env:  # look at all of them: the time does not depend on which matched
            if hmac.compare_digest(env.digest, digest):
                found = env.project_id
        if found is not None:
            return found
        if self._store is not None:
            project = await self._store.project_of(key)
            if project is not None:
                return project
        raise AuthError("unknown API key")
