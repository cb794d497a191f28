"""mongomem inside the agent frameworks people use (SPEC N1–N3).

Each module is one framework's adapter, in the extra of the same name; importing
it without that extra raises :class:`~mongomem.errors.MissingExtra`, one line that
names the extra and the command that installs it:

===========================================  ======================  ==============================
module                                       extra                   what it is
===========================================  ======================  ==============================
:mod:`mongomem.integrations.langgraph`       ``langgraph``           a LangGraph ``BaseStore`` over
                                                                     long-term memory
:mod:`mongomem.integrations.openai_agents`   ``openai-agents``       an OpenAI Agents SDK
                                                                     ``Session`` over short-term
                                                                     memory
:mod:`mongomem.integrations.llamaindex`      ``llamaindex``          a memory block for
                                                                     LlamaIndex's ``Memory``
:mod:`mongomem.integrations.crewai`          ``crewai``              a CrewAI ``ExternalMemory``
                                                                     storage
===========================================  ======================  ==============================

Every adapter goes through the SDK (:mod:`mongomem.sdk`), so a write through a
framework is reconciled, versioned and scoped exactly like a direct SDK call, and
works on either transport (straight to MongoDB, or the HTTP service). Where a
framework feature has no faithful mapping the adapter refuses it with
:class:`~mongomem.errors.Unmappable` naming the mapping; it never stores
something silently different. This package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
