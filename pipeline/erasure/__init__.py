"""Erasure (SPEC J2, J3): erasing a user, a session or a project, replay-proof.

:mod:`~mongomem.erasure.erase` runs an erasure over every derived record,
:mod:`~mongomem.erasure.register` remembers what is erased so no replay brings
it back, and :mod:`~mongomem.erasure.prune` is the lineage rule applied to one
memory's versions.
"""
