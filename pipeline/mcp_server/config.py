"""How an MCP server is launched: whom it acts for, and over which transport.

The identity is fixed at launch (``--project-id`` plus ``--user-id`` or
``--service-account``) and never comes from a tool argument; see
:mod:`mongomem.mcp_server` for why. This module does not import the MCP SDK, so
``mongomem --help`` stays fast.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mongomem.mcp_server.options import add_arguments
from mongomem.models import utcnow
from mongomem.sdk.models import MemoryRequestContext

__all__ = ["McpServerConfig", "add_arguments", "config_from_args", "parse_args"]

TransportName = Literal["stdio", "streamable-http"]


class McpServerConfig(BaseModel):
    """One server process: the caller it acts for, its default session, its transport."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project_id: str
    user_id: str | None = None
    service_account: str | None = None
    session_id: str = Field(default_factory=lambda: default_session_id())
    transport: TransportName = "stdio"
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)

    @model_validator(mode="after")
    def _someone(self) -> McpServerConfig:
        if (self.user_id is None) == (self.service_account is None):
            raise ValueError("give exactly one of user_id and service_account")
        return self

    def request_context(self, session_id: str | None = None) -> MemoryRequestContext:
        """The SDK context of a call; ``session_id`` picks another session of the same caller."""
        return MemoryRequestContext(
            user_id=self.user_id,
            service_account=self.service_account,
            session_id=self.session_id if session_id is None else session_id,
        )


def default_session_id() -> str:
    """A fresh session id for a server started without ``--session-id``."""
    return f"mcp-{utcnow():%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def config_from_args(args: argparse.Namespace) -> McpServerConfig:
    values = {
        "project_id": args.project_id,
        "user_id": args.user_id,
        "service_account": args.service_account,
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
    }
    if args.session_id is not None:
        values["session_id"] = args.session_id
    return McpServerConfig.model_validate(values)


def parse_args(argv: Sequence[str] | None = None) -> McpServerConfig:
    parser = argparse.ArgumentParser(
        prog="mongomem mcp", description="Serve mongomem memory to an MCP client."
    )
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))
