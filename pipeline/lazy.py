"""A module imported where it is first used, not where it is named (issue 25).

numpy is needed only where vectors are: a search, a save, a reconciliation. The
modules that hold vector code name it at the top as usual for the type checker,
and at run time through :func:`lazy_module`::

    if TYPE_CHECKING:
        import numpy as np
    else:
        np = lazy_module("numpy", globals(), "np")

so a command that only reads (``mongomem memory list``, ``export``, ``spaces
list``) imports those modules without paying for numpy. The first attribute read
(``np.zeros``) imports the module and puts it in the stand-in's place in the
namespace: from then on ``np`` is numpy itself, a plain global lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["LazyModule", "lazy_exports", "lazy_module"]


class LazyModule:
    """Stands for the module ``name``, bound to ``alias`` in ``namespace``, until first used."""

    __slots__ = ("_alias", "_name", "_namespace")

    def __init__(self, name: str, namespace: dict[str, Any], alias: str) -> None:
        self._name = name
        self._namespace = namespace
        self._alias = alias

    def __getattr__(self, attribute: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"


def lazy_module(name: str, namespace: dict[str, Any], alias: str) -> Any:
    """A stand-in for module ``name`` to bind to ``alias`` in ``namespace`` (a module's
    ``globals()``): its first attribute read imports the module and rebinds ``alias`` to it."""
    return LazyModule(name, namespace, alias)


def lazy_exports(
    package: str, namespace: dict[str, Any], table: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names it exports without importing
    their modules: ``table`` maps each name to the module that defines it, imported when
    the name is first read (then kept in ``namespace``, the package's ``globals()``)."""

    def getattr_(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_
