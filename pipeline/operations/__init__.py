"""The pipeline's own bookkeeping, as an operator sees it.

Processing status per snapshot and type (:mod:`~mongomem.operations.progress`,
SPEC J6), LLM usage (:mod:`~mongomem.operations.usage`), stage restarts
(:mod:`~mongomem.operations.restarts`), consumer lag and replay positions
(:mod:`~mongomem.operations.status`) and dead letters
(:mod:`~mongomem.operations.dlq`).
"""
