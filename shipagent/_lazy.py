"""Names a package exports but imports on first use (PEP 562 module ``__getattr__``).

``from shipagent import ShipAgent`` should cost little more than pydantic-ai itself:
a package ``__init__`` that imports its command-line sub-app (typer, rich) or a room's whole
machinery for one name the core needs makes every program pay for what only some use. A
package lists those names here instead; they stay in its ``__all__`` and in ``dir()``, and
type checkers see them through an ``if TYPE_CHECKING:`` import beside the call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` that loads ``name`` from ``package + homes[name]``.

    Args:
        package: the package's ``__name__``.
        homes: public name -> the submodule defining it, relative (``"._cli"``).

    Returns:
        The function to bind as the package's ``__getattr__``; it caches each loaded name in the
        package's namespace, so later lookups are plain attribute reads.
    """

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(package)
        value = getattr(importlib.import_module(home, package), name)
        setattr(module, name, value)
        return value

    return __getattr__
