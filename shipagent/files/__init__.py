"""Context files: big things the model may need later, kept as files it can page through.

Spilled tool output, compacted conversation and the capability catalog become files under
``.ship/context/<chat key>/``, each with a :class:`ContextRef`; the model reaches them with the
``context_list`` / ``context_read`` / ``context_tail`` / ``context_grep`` tools, and a chat's files
can be exported and imported on their own.

Typical wiring::

    files = ContextFiles(ShipPaths(project_root))          # or ShipAgent(...).context_files
    toolsets = [SpillToolset(ts) for ts in (*my_toolsets, context_toolset())]
    toolset = CatalogToolset(CombinedToolset(toolsets), skills=...)
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes
from .._patterns import UnsupportedPatternError
from ._catalog import CatalogToolset, SkillsSource
from ._grep import GrepMatch, GrepResult, InvalidPatternError, find_ripgrep, grep_file
from ._paging import Page, Tail
from ._ref import CONTEXT_KINDS, ContextKind, ContextRef
from ._render import render_catalog, render_messages, render_preview
from ._spill import SpillToolset, spill_text, spill_value
from ._store import CATALOG_ID, ContextFiles
from ._tools import (
    CONTEXT_TOOL_NAMES,
    NO_SPILL_METADATA,
    context_files_for,
    context_grep,
    context_list,
    context_read,
    context_tail,
    context_toolset,
)
from ._transfer import EXPORT_VERSION

if TYPE_CHECKING:
    from ._cli import context_app

# the ``shipagent context`` sub-app needs typer and rich: loaded when the command runs, not with the
# agent that only uses the files
__getattr__ = lazy_attributes(__name__, {"context_app": "._cli"})

__all__ = [
    "CATALOG_ID",
    "CONTEXT_KINDS",
    "CONTEXT_TOOL_NAMES",
    "EXPORT_VERSION",
    "NO_SPILL_METADATA",
    "CatalogToolset",
    "ContextFiles",
    "ContextKind",
    "ContextRef",
    "GrepMatch",
    "GrepResult",
    "InvalidPatternError",
    "Page",
    "SkillsSource",
    "SpillToolset",
    "Tail",
    "UnsupportedPatternError",
    "context_app",
    "context_files_for",
    "context_grep",
    "context_list",
    "context_read",
    "context_tail",
    "context_toolset",
    "find_ripgrep",
    "grep_file",
    "render_catalog",
    "render_messages",
    "render_preview",
    "spill_text",
    "spill_value",
]
