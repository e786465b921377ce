"""Context files as data: the files under ``.ship/context/<chat key>/`` and their index.

:class:`ContextFiles` reads and writes them; a :class:`ContextRef` names one; :class:`Page` and
:class:`Tail` are what a read returns. The tools the model uses on them are in
:mod:`shipagent.tools.files`.
"""

from ._paging import Page, Tail
from ._ref import ContextKind, ContextRef
from ._store import ContextFiles

__all__ = ["ContextFiles", "ContextKind", "ContextRef", "Page", "Tail"]
