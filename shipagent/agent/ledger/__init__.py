"""The ledger: what each model request carried, and why.

Part of the agent: the context window reports every request to an observer; this package keeps
those reports per chat in ``.ship/chats/<key>/requests.jsonl``, rebuilds any
recorded request exactly (``agent.reconstruct``) and renders them (``shipagent inspect``).
"""

from ._ledger import Ledger
from ._records import LedgerItem, LedgerReferenceError, RequestRecord

__all__ = ["Ledger", "LedgerItem", "LedgerReferenceError", "RequestRecord"]
