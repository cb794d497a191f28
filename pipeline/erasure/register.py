"""The erasure register (SPEC J3): which projects, users and sessions are erased.

Every writer asks :class:`ErasureRegister` before it writes (see
:mod:`mongomem.erasure.erase`). A check is one ``find`` by ``_id`` over the (at most
three) register ids that cover a session; a positive answer is cached for the
life of the register (an erasure is never undone). A negative one is kept only
by a register made with ``remember_absent=True`` (short-term memory's, on the
turn path, the SDK's, on the save path, and the windowing stage's, for
:meth:`ErasureRegister.erased_among`), and for at most :data:`NOT_ERASED_TTL_S`
(or the register's shorter ``absent_ttl_s``) from the moment its read was sent;
:func:`mongomem.erasure.erase.erase` waits that long after writing the register
before its second sweep, so a write that relied on such an answer has landed by
then and is swept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from mongomem.adapters.mongo import Document
from mongomem.errors import Erased, StorageError
from mongomem.models import SessionKey, stable_id

__all__ = ["ERASURES", "NOT_ERASED_TTL_S", "ErasureRegister", "erasure_id", "refusal"]

#: The register (and job record) of erasures.
ERASURES = "erasures"
#: How long a "not erased" answer may be relied on (from when its read was sent).
NOT_ERASED_TTL_S = 1.0
#: Targets whose "not erased" answer a register keeps, at most.
_ABSENT_CACHE = 10_000


def erasure_id(project_id: str, user_id: str | None = None, session_id: str | None = None) -> str:
    """The register id of an erasure of this target."""
    return stable_id("erase", project_id, user_id or "", session_id or "")


class ErasureRegister:
    """Which projects, users and sessions are erased (read by every writer)."""

    def __init__(
        self,
        db: AsyncDatabase[Document],
        *,
        remember_absent: bool = False,
        absent_ttl_s: float = NOT_ERASED_TTL_S,
    ) -> None:
        """``remember_absent``: keep "not erased" answers for ``absent_ttl_s`` (capped at
        :data:`NOT_ERASED_TTL_S`, as it is when a check runs) from when their read was
        sent; else every check reads."""
        self._erasures = db[ERASURES]
        self._known: set[str] = set()
        self._remember_absent = remember_absent
        self._absent_ttl_s = max(0.0, absent_ttl_s)
        #: target → (its covering ids, monotonic time its "not erased" read was sent)
        self._absent: OrderedDict[tuple[str, str | None, str | None], tuple[list[str], float]]
        self._absent = OrderedDict()

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
        return (await self._check((project_id, user_id, session_id)))[0]

    async def _check(self, target: tuple[str, str | None, str | None]) -> tuple[bool, float]:
        """Whether ``target`` is erased, and when (monotonic) the read that says so was sent."""
        ids, answer = self._answer(target)
        if answer is True:
            return True, time.monotonic()
        if answer is False:  # remembered, and younger than NOT_ERASED_TTL_S
            return False, self._absent[target][1]
        sent = time.monotonic()
        try:  # all of them (at most three): a refusal names the widest erased
            found = await self._erasures.find({"_id": {"$in": ids}}, {"_id": 1}).to_list()
        except PyMongoError as exc:
            raise StorageError(f"could not read the erasure register: {exc}") from exc
        if not found:
            if self._remember_absent:
                self._remember(target, ids, sent)
            return False, sent
        self._known.update(str(d["_id"]) for d in found)
        self._absent.pop(target, None)
        return True, sent

    async def erased_among(self, sessions: Iterable[SessionKey]) -> set[SessionKey]:
        """The erased ones among ``sessions`` (at most one read for all).

        With ``remember_absent``, a session read as not erased less than the
        register's ``absent_ttl_s`` ago is answered without a read, and the
        sessions read now are remembered as :meth:`refuse_erased` remembers its
        target (a batch stage sees the same sessions batch after batch).
        """
        erased: set[SessionKey] = set()
        asked: dict[SessionKey, tuple[tuple[str, str | None, str | None], list[str]]] = {}
        for key in set(sessions):
            target: tuple[str, str | None, str | None] = (
                key.project_id,
                key.user_id,
                key.session_id,
            )
            ids, answer = self._answer(target)
            if answer is True:
                erased.add(key)
            elif answer is None:
                asked[key] = (target, ids)
        if not asked:
            return erased
        unknown = {i for _, ids in asked.values() for i in ids} - self._known
        sent = time.monotonic()
        if unknown:
            try:
                found = await self._erasures.find(
                    {"_id": {"$in": sorted(unknown)}}, {"_id": 1}
                ).to_list()
            except PyMongoError as exc:
                raise StorageError(f"could not read the erasure register: {exc}") from exc
            self._known.update(str(d["_id"]) for d in found)
        for key, (asked_target, ids) in asked.items():
            if self._known.intersection(ids):
                erased.add(key)
                self._absent.pop(asked_target, None)
            elif self._remember_absent:
                self._remember(asked_target, ids, sent)
        return erased

    def _remember(
        self, target: tuple[str, str | None, str | None], ids: list[str], sent: float
    ) -> None:
        """Keep ``target``'s "not erased" answer, read (sent) at ``sent``."""
        self._absent[target] = (ids, sent)
        self._absent.move_to_end(target)
        while len(self._absent) > _ABSENT_CACHE:
            self._absent.popitem(last=False)

    def remembered(
        self, project_id: str, user_id: str | None = None, session_id: str | None = None
    ) -> bool | None:
        """What this register can answer without a read: ``True`` (known erased), ``False``
        (read as not erased less than ``absent_ttl_s`` ago), ``None`` (ask)."""
        return self._answer((project_id, user_id, session_id))[1]

    def _answer(self, target: tuple[str, str | None, str | None]) -> tuple[list[str], bool | None]:
        """The target's covering ids, and what is known of it without a read."""
        remembered = self._absent.get(target)
        ids = remembered[0] if remembered else self._covering(*target)
        if self._known.intersection(ids):
            return ids, True
        trusted_s = min(self._absent_ttl_s, NOT_ERASED_TTL_S)
        if remembered is not None and time.monotonic() - remembered[1] < trusted_s:
            return ids, False
        return ids, None

    async def refuse_erased(self, project_id: str, user_id: str, session_id: str | None) -> float:
        """Raise :class:`~mongomem.errors.Erased` if the project, user or session is erased.

        Else the monotonic time the "not erased" answer it relies on was read (sent): a
        write may rely on it until :data:`NOT_ERASED_TTL_S` after that (a remembered
        answer is older than this call).
        """
        erased, sent = await self._check((project_id, user_id, session_id))
        if erased:
            raise self.refusal(project_id, user_id, session_id)
        return sent

    def refusal(self, project_id: str, user_id: str, session_id: str | None) -> Erased:
        """The refusal of a write to this target, naming the widest erasure known to cover it."""
        if erasure_id(project_id) in self._known:
            return refusal(user_id, session_id, project_id=project_id, erased="project")
        if erasure_id(project_id, user_id) in self._known or session_id is None:
            return refusal(user_id, session_id, project_id=project_id, erased="user")
        return refusal(user_id, session_id, project_id=project_id, erased="session")


def refusal(
    user_id: str,
    session_id: str | None,
    *,
    project_id: str | None = None,
    erased: Literal["project", "user", "session"] | None = None,
) -> Erased:
    """The :class:`~mongomem.errors.Erased` a writer raises for an erased target.

    ``erased`` says what was erased (default: the session if one is named, else
    the user); a project's erasure says "project erased", so that nobody takes it
    for one user's or session's.
    """
    what = erased or ("session" if session_id is not None else "user")
    if what == "project":
        return Erased(
            f"project erased: project {project_id!r} was erased and its id is retired; "
            "nothing is written to it again, for any user (use another project id)"
        )
    whose = f"user {user_id!r}" if what == "user" else f"session {session_id!r} of user {user_id!r}"
    return Erased(
        f"{what} erased: {whose} was erased; its id is retired and nothing is written for it"
    )
