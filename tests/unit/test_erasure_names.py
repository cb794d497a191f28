"""The erasure reaches every collection by the names their owners give them."""

from mongomem.erasure import erase as erasure
from mongomem.operations import usage


def test_the_usage_collection_is_the_one_the_usage_recorder_writes() -> None:
    assert erasure.LLM_USAGE == usage.LLM_USAGE
