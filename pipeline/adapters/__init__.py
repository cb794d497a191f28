"""Adapters (layer 2): how mongomem reaches the systems outside it.

MongoDB (:mod:`~mongomem.adapters.mongo`), Kafka (:mod:`~mongomem.adapters.kafka`),
the LLM (:mod:`~mongomem.adapters.llm`), embedding providers
(:mod:`~mongomem.adapters.embeddings`), TLS for our HTTP servers and clients
(:mod:`~mongomem.adapters.tls`), and the readiness check that refuses to start
without an LLM and an embedder (:mod:`~mongomem.adapters.readiness`). Each
translates its library's errors into the one error tree at its boundary.
Adapters import only the core (the package's top floor).
"""
