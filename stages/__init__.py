"""The stream stages of mongomem, one module or subpackage per stage.

watcher → windowing → extractor (one consumer group per memory type) →
reconciler. Each runs as its own process (``mongomem run <stage>``) on the
one stage runtime, :mod:`mongomem.stages.runtime`, which states their
delivery contract; its :mod:`~mongomem.stages.runtime.kafka` is the only stage
module that imports aiokafka (the optional faust engine,
:mod:`mongomem.stages.windowing.app`, brings its own).
"""

from mongomem.extras import require

with require("stages"):
    import prometheus_client  # noqa: F401  (every stage serves metrics)

    import mongomem.stages.runtime.kafka  # noqa: F401  (every stage reads and writes Kafka)
