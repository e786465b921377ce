"""Context files: big things the model may need later, kept as files it can page through.

Spilled tool output, compacted conversation and the tool catalog (the skills and tools the agent
has) become files under ``.ship/context/<chat key>/``, each with a :class:`ContextRef`; the model
reaches them with the ``context_list`` / ``context_read`` / ``context_tail`` / ``context_grep``
tools, and a chat's files can be exported and imported on their own.

Typical wiring::

    files = ContextFiles(ShipPaths(project_root))          # or ShipAgent(...).context_files
    toolsets = [SpillToolset(ts) for ts in (*my_toolsets, context_toolset())]
    toolset = CatalogToolset(CombinedToolset(toolsets), skills=...)
"""

from ...store.files import ContextFiles, ContextKind, ContextRef, Page, Tail
from ._catalog import CatalogToolset
from ._spill import SpillToolset
from ._tools import NO_SPILL_METADATA, context_files_for, context_toolset

__all__ = [
    "NO_SPILL_METADATA",
    "CatalogToolset",
    "ContextFiles",
    "ContextKind",
    "ContextRef",
    "Page",
    "SpillToolset",
    "Tail",
    "context_files_for",
    "context_toolset",
]
