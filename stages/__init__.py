"""The stream stages of mongomem, one module or subpackage per stage.

watcher → windowing → extractor (one consumer group per memory type) →
reconciler. Each runs as its own process: ``mongomem run <stage>``.
"""

from mongomem.extras import require

with require("stages"):
    import aiokafka  # noqa: F401  (every stage reads and writes Kafka)
    import prometheus_client  # noqa: F401  (every stage serves metrics)
