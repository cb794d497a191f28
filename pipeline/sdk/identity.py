"""Who a call acts for, and which scopes that opens (SPEC F1–F3).

=====================================  =========================================
context                                memory identity
=====================================  =========================================
``user_id`` (standalone, F2)           ``(project, user_id)``
``service_account`` (deployed, F1)     ``(project, "sa:" + service_account)``;
                                       an end-user ``user_id`` is **ignored**
=====================================  =========================================

User ids beginning with ``sa:`` are reserved for service accounts, so an end
user can never land in a service account's scope. Taxonomic memories live in
the project scope, which every identity of the project reads and writes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from mongomem.errors import InputError, ScopeError
from mongomem.ltm.kinds import scope_for
from mongomem.models import MemoryScope, SessionKey, check_identifier
from mongomem.sdk.models import MemoryRequestContext

__all__ = ["SERVICE_ACCOUNT_PREFIX", "Identity", "resolve_identity"]

SERVICE_ACCOUNT_PREFIX = "sa:"


class Identity(BaseModel):
    """A resolved caller: the scopes every read and write of a call is confined to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: str
    user_id: str
    session_id: str | None = None
    service_account: bool = False

    def scope(self, memory_type: str) -> MemoryScope:
        return scope_for(memory_type, self.project_id, self.user_id)

    @property
    def scopes(self) -> tuple[MemoryScope, MemoryScope]:
        """The caller's user scope and its project scope."""
        return (
            MemoryScope(project_id=self.project_id, user_id=self.user_id),
            MemoryScope(project_id=self.project_id),
        )

    def session(self) -> SessionKey:
        if self.session_id is None:
            raise InputError("this call needs a session_id in the context", field="session_id")
        return SessionKey(
            project_id=self.project_id, user_id=self.user_id, session_id=self.session_id
        )


def _checked(value: str, field: str) -> str:
    try:
        return check_identifier(value)
    except ValueError as exc:
        raise InputError(f"{field} {exc}", field=field) from None


def resolve_identity(project_id: str, ctx: MemoryRequestContext) -> Identity:
    """The identity a call with ``ctx`` acts as (see the module table)."""
    project = _checked(project_id, "project_id")
    session = None if ctx.session_id is None else _checked(ctx.session_id, "session_id")
    if ctx.service_account is not None:
        account = _checked(ctx.service_account, "service_account")
        user = _checked(SERVICE_ACCOUNT_PREFIX + account, "service_account")
        return Identity(project_id=project, user_id=user, session_id=session, service_account=True)
    assert ctx.user_id is not None  # the context's validator guarantees one of the two
    user = _checked(ctx.user_id, "user_id")
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        raise ScopeError(f"user ids beginning with {SERVICE_ACCOUNT_PREFIX!r} are reserved")
    return Identity(project_id=project, user_id=user, session_id=session)
