"""The stream stages of mongomem, one module or subpackage per stage.

watcher → windowing → extractor (one consumer group per memory type) →
reconciler. Each runs as its own process: ``mongomem run <stage>``.
"""
