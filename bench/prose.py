"""Turn texts for the benchmarks that compress like conversation text.

A sentence repeated four times, the same for every turn, compresses far
better than anything people write, and would flatter every compressed path
(``MONGOMEM_KAFKA_COMPRESSION``). :func:`texts` draws each text's words at
random with the frequencies of real English prose: the docstrings of
standard-library modules and their public members, read through
:func:`inspect.getdoc` (the same words for the same Python version; no file
or network needed). zstd shrinks such texts a little less than the prose
itself (about 2.7× against 3.1×), so the benchmarks do not flatter it.
"""

from __future__ import annotations

import importlib
import inspect
import random

__all__ = ["texts"]

_MODULES = (
    "argparse",
    "asyncio",
    "collections",
    "csv",
    "dataclasses",
    "decimal",
    "email.message",
    "functools",
    "http.client",
    "inspect",
    "json",
    "logging",
    "pathlib",
    "pickle",
    "shutil",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib.request",
    "zipfile",
)


def _words() -> list[str]:
    words: list[str] = []
    seen: set[str] = set()  # inherited docstrings repeat; each counts once
    for name in _MODULES:
        module = importlib.import_module(name)
        docs = [inspect.getdoc(module) or ""]
        for attribute in sorted(getattr(module, "__all__", None) or dir(module)):
            if not attribute.startswith("_"):
                docs.append(inspect.getdoc(getattr(module, attribute, None)) or "")
        for doc in docs:
            if doc not in seen:
                seen.add(doc)
                words.extend(doc.split())
    return words


def texts(count: int, *, words: tuple[int, int] = (45, 75), seed: int = 7) -> list[str]:
    """``count`` texts of ``words`` words each (bounds included), the same for the same seed."""
    corpus = _words()
    rng = random.Random(seed)
    return [" ".join(rng.choices(corpus, k=rng.randint(*words))) for _ in range(count)]
