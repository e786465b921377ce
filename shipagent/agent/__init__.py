"""The agent: :class:`ShipAgent` and the turn it runs.

:class:`ShipAgent` (``_agent``) reads a project, builds the model, the toolsets and the context
window from ``ship.json``, and starts and stops them in order (``_lifecycle``). Each turn is
``_turn.run_turn``: a function of explicit parts — the store, the model, the toolsets, the window
policy, the clock — that never sees the agent; ``_commit`` turns what a run produced into one
record for the store. ``models`` builds the model a project names, ``instructions`` the
instructions, and ``ledger`` records what every model request carried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import ShipAgent

__all__ = ["ShipAgent"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, like the names of ``shipagent`` itself: ``import shipagent`` imports this
    # package (for the executor registry) and must not pay for pydantic-ai yet.
    if name == "ShipAgent":
        from ._agent import ShipAgent

        return ShipAgent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
