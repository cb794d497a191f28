"""The ``mongomem`` command (SPEC G4): one module per command group.

:mod:`~mongomem.cli.main` builds the parser and dispatches; the groups are
``operate`` (status, configure, apply, replay), ``dlq``, ``erase``, ``export``
(export and import), ``memory``, ``retention`` (expire), ``spaces``,
``service`` (serve, keys) and ``eval``. ``python -m mongomem.cli`` runs it too.
"""
