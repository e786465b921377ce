"""The ledger: what each model request carried, and why.

A room beside the core: the core's context window reports every request to an observer; this
package keeps those reports per chat in ``.ship/chats/<key>/requests.jsonl``, rebuilds any
recorded request exactly (``agent.reconstruct``) and renders them (``shipagent inspect``).
"""

from typing import TYPE_CHECKING, Any

from ._inspect import ItemChange, diff_records, ledger_stats
from ._ledger import Ledger, LedgerRecorder
from ._records import LedgerItem, LedgerReferenceError, RequestRecord
from ._store import LedgerStore

if TYPE_CHECKING:
    from ._cli import inspect_command

__all__ = [
    "ItemChange",
    "Ledger",
    "LedgerItem",
    "LedgerRecorder",
    "LedgerReferenceError",
    "LedgerStore",
    "RequestRecord",
    "diff_records",
    "inspect_command",
    "ledger_stats",
]


def __getattr__(name: str) -> Any:
    """``inspect_command`` loads the CLI (typer, rich) only when asked for (PEP 562)."""
    if name == "inspect_command":
        from ._cli import inspect_command

        return inspect_command
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
