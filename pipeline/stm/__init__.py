"""Short-term memory (SPEC A1–A3): the ``turns`` collection and what reads it.

:mod:`~mongomem.stm.turns` records and reads turns, :mod:`~mongomem.stm.lineage`
says which snapshot holds a turn, and :mod:`~mongomem.stm.recall` marks the
context mongomem hands to an agent so it never returns as evidence (K3).
"""
