"""Benchmarks. Each compares mongomem against a raw baseline in the same run.

``python -m bench`` runs them all; each writes ``bench/results/<name>.md`` with
the command that produced it, and ``bench/RESULTS.md`` collects them.
"""
