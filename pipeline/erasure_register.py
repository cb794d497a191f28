"""The erasure register (SPEC J3): which projects, users and sessions are erased.

Every writer asks :class:`ErasureRegister` before it writes (see
:mod:`mongomem.erasure`). A check is one ``find`` by ``_id`` over the (at most
three) register ids that cover a session; a positive answer is cached for the
life of the register (an erasure is never undone), a negative one never is.
"""

from __future__ import annotations

from collections.abc import Iterable

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.errors import Erased, StorageError
from mongomem.models import SessionKey, stable_id
from mongomem.mongo import Document

__all__ = ["ERASURES", "ErasureRegister", "erasure_id"]

#: The register (and job record) of erasures.
ERASURES = "erasures"


def erasure_id(project_id: str, user_id: str | None = None, session_id: str | None = None) -> str:
    """The register id of an erasure of this target."""
    return stable_id("erase", project_id, user_id or "", session_id or "")


class ErasureRegister:
    """Which projects, users and sessions are erased (read by every writer)."""

    def __init__(self, db: AsyncDatabase[Document]) -> None:
        self._erasures = db[ERASURES]
        self._known: set[str] = set()

    @staticmethod
    def _covering(project_id: str, user_id: str | None, session_id: str | None) -> list[str]:
        ids = [erasure_id(project_id)]
        if user_id is not None:
            ids.append(erasure_id(project_id, user_id))
            if session_id is not None:
                ids.append(erasure_id(project_id, user_id, session_id))
        return ids

    async def is_erased(
        self, project_id: str, user_id: str | None = None, session_id: str | None = None
    ) -> bool:
        """Whether the project, the user or the session is erased (or being erased)."""
        ids = self._covering(project_id, user_id, session_id)
        if self._known.intersection(ids):
            return True
        try:
            found = await self._erasures.find_one({"_id": {"$in": ids}}, {"_id": 1})
        except PyMongoError as exc:
            raise StorageError(f"could not read the erasure register: {exc}") from exc
        if found is None:
            return False
        self._known.add(str(found["_id"]))
        return True

    async def erased_among(self, sessions: Iterable[SessionKey]) -> set[SessionKey]:
        """The erased ones among ``sessions`` (one read for all)."""
        keys = set(sessions)
        wanted = {k: self._covering(k.project_id, k.user_id, k.session_id) for k in keys}
        unknown = {i for ids in wanted.values() for i in ids} - self._known
        if unknown:
            try:
                found = await self._erasures.find(
                    {"_id": {"$in": sorted(unknown)}}, {"_id": 1}
                ).to_list()
            except PyMongoError as exc:
                raise StorageError(f"could not read the erasure register: {exc}") from exc
            self._known.update(str(d["_id"]) for d in found)
        return {k for k, ids in wanted.items() if self._known.intersection(ids)}

    async def refuse_erased(self, project_id: str, user_id: str, session_id: str | None) -> None:
        """Raise :class:`~mongomem.errors.Erased` if the user or session is erased."""
        if await self.is_erased(project_id, user_id, session_id):
            what = "session" if session_id is not None else "user"
            raise Erased(
                f"this {what} was erased; its id is retired (user {user_id!r}, "
                f"session {session_id!r}) and nothing is written for it"
            )
