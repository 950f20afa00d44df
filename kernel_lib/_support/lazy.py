"""Package exports that load on first use (PEP 562), for packages whose modules are heavy or are
also run as processes (``python -m kernel_lib.live.worker``): the package ``__init__`` still lists
every public name (``__all__``, ``dir()``), and ``from package import name`` works."""

from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package``, given ``{module: (name, ...)}``.

    Raises (from ``__getattr__``): AttributeError for a name the package does not offer."""
    where = {name: module for module, names in exports.items() for name in names}
    public = sorted(where)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def __dir__() -> list[str]:
        return sorted(set(public) | {"__doc__", "__name__", "__all__"})

    return public, __getattr__, __dir__
