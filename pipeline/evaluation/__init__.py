"""Memory-quality evaluation on the public LoCoMo and LongMemEval formats (SPEC K5).

:mod:`~mongomem.evaluation.datasets` reads the files,
:mod:`~mongomem.evaluation.harness` runs ``mongomem eval`` against a running
pipeline, :mod:`~mongomem.evaluation.report` writes the results.
"""
