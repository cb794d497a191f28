"""Prometheus metrics shared by the stages (SPEC I5).

Each stage process serves its own registry on ``MONGOMEM_METRICS_PORT`` (when
set) at ``/metrics``. The names:

==========================================  ========================================
metric                                      labels
==========================================  ========================================
``mongomem_messages_total``                 stage, outcome (ok, duplicate, dead_letter)
``mongomem_dead_letters_total``             stage
``mongomem_consumer_lag``                   stage, topic, partition
``mongomem_llm_latency_seconds``            memory_type
``mongomem_llm_calls_total``                memory_type (counted before each request)
``mongomem_llm_tokens_total``               memory_type, kind (prompt, completion)
``mongomem_llm_snapshot_tokens``            memory_type (tokens one snapshot cost)
``mongomem_llm_query_calls_total``          purpose (LLM calls made for queries)
``mongomem_llm_query_tokens``               purpose (tokens one query cost)
``mongomem_reconcile_actions_total``        memory_type, action (ADD, UPDATE, REINFORCE, NOOP)
``mongomem_stage_batch_seconds``            stage
==========================================  ========================================
"""

from __future__ import annotations

from mongomem.extras import require

with require("stages"):
    from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

__all__ = [
    "CONSUMER_LAG",
    "DEAD_LETTERS",
    "EXTRACTION_RESULTS",
    "LLM_CALLS",
    "LLM_LATENCY",
    "LLM_QUERY_CALLS",
    "LLM_QUERY_TOKENS",
    "LLM_REQUESTS",
    "LLM_REQUEST_TOKENS",
    "LLM_SNAPSHOT_TOKENS",
    "LLM_TOKENS",
    "MESSAGES",
    "RECONCILE_ACTIONS",
    "STAGE_BATCH_SECONDS",
    "serve_metrics",
]

MESSAGES = Counter(
    "mongomem_messages", "Messages handled by a stage", ["stage", "outcome"], registry=REGISTRY
)
DEAD_LETTERS = Counter(
    "mongomem_dead_letters", "Messages sent to a dead-letter topic", ["stage"], registry=REGISTRY
)
CONSUMER_LAG = Gauge(
    "mongomem_consumer_lag",
    "Records between the committed position and the end of a partition",
    ["stage", "topic", "partition"],
    registry=REGISTRY,
)
LLM_LATENCY = Histogram(
    "mongomem_llm_latency_seconds",
    "Latency of one LLM extraction call",
    ["memory_type"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
LLM_TOKENS = Counter(
    "mongomem_llm_tokens", "LLM tokens used", ["memory_type", "kind"], registry=REGISTRY
)
LLM_REQUESTS = Counter(
    "mongomem_llm_requests",
    "LLM requests sent, per purpose (extract, judge, eval-*, answer …; counted once each)",
    ["purpose"],
    registry=REGISTRY,
)
LLM_REQUEST_TOKENS = Counter(
    "mongomem_llm_request_tokens",
    "LLM tokens used, per purpose",
    ["purpose", "kind"],
    registry=REGISTRY,
)
EXTRACTION_RESULTS = Counter(
    "mongomem_extraction_results",
    "Extraction answers used, by source: llm (asked) or stored (reused, SPEC I6)",
    ["memory_type", "source"],
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    "mongomem_llm_calls",
    "LLM requests sent for extraction (counted before each is sent)",
    ["memory_type"],
    registry=REGISTRY,
)
_TOKEN_BUCKETS = (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000)
LLM_SNAPSHOT_TOKENS = Histogram(
    "mongomem_llm_snapshot_tokens",
    "LLM tokens (prompt + completion) one snapshot cost one memory type",
    ["memory_type"],
    buckets=_TOKEN_BUCKETS,
    registry=REGISTRY,
)
LLM_QUERY_CALLS = Counter(
    "mongomem_llm_query_calls",
    "LLM requests sent to answer queries (counted before each is sent)",
    ["purpose"],
    registry=REGISTRY,
)
LLM_QUERY_TOKENS = Histogram(
    "mongomem_llm_query_tokens",
    "LLM tokens (prompt + completion) one query cost",
    ["purpose"],
    buckets=_TOKEN_BUCKETS,
    registry=REGISTRY,
)
RECONCILE_ACTIONS = Counter(
    "mongomem_reconcile_actions",
    "Reconciliation decisions applied",
    ["memory_type", "action"],
    registry=REGISTRY,
)
STAGE_BATCH_SECONDS = Histogram(
    "mongomem_stage_batch_seconds", "Time to handle one batch", ["stage"], registry=REGISTRY
)


def serve_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``host:port`` (no-op when ``port`` is ``None``)."""
    if port is not None:
        start_http_server(port, addr=host)
