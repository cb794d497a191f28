"""Running mongomem on one machine: ``mongomem up``/``down`` and what they need.

:mod:`~mongomem.local.runner` (up/down), :mod:`~mongomem.local.supervisor`
(stages as supervised processes), :mod:`~mongomem.local.infra` (which Kafka and
MongoDB to talk to: a URI, testcontainers, or local servers),
:mod:`~mongomem.local.servers` (the local Apache Kafka broker and
mongo-java-server), :mod:`~mongomem.local.demo` (``make run``) and
:mod:`~mongomem.local.llm_stand_in` (the labelled scripted stand-in for an LLM).
"""
