"""``context_pin`` and ``context_unpin``: the model keeps a fact the user gave out of compaction's reach.

Offered when ship.json ``context.pins.enabled`` is on (the default). A pin lives in the chat's
``pins.json`` (:mod:`shipagent.store.pins`) and reaches the model in the instructions of every
request from the next turn on. A refusal (empty text, no room) comes back as
``{"success": false, "error": ..., "unpin": [...]}`` so the model can unpin and try again;
nothing is raised into the run.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset

from ..errors import ShipAgentError
from ..store.pins import PinError, PinStore, normalize_id, pins_tokens
from ._deps import TurnDeps, deps_of

__all__ = ["PIN_TOOL_NAMES", "pins_toolset"]

PIN_TOOL_NAMES = ("context_pin", "context_unpin")


def _store(run: RunContext[TurnDeps]) -> tuple[PinStore, str]:
    tool = deps_of(run).tool
    return PinStore(tool.paths, tool.config.context.pins), tool.chat_key


async def context_pin(run: RunContext[TurnDeps], text: str) -> dict[str, Any]:
    """Pin a short fact the user gave you: it stays in every request of this chat, however long it gets.

    Older messages are summarised as the chat grows and a summary can drop details. Pin what the
    user told you that will matter later: their name and the names of people and things, their
    preferences, decisions taken, deadlines. One fact per pin, one short sentence, in your words
    ("The user's name is Ada."). Do not pin what you can look up again or what only mattered for
    this turn. Pins are listed under "Pinned facts" in your instructions from the next turn on. Their
    total size is limited: when a pin is refused for room, unpin one that no longer holds.

    Args:
        text: the fact, one short sentence.
    """
    store, chat_key = _store(run)
    try:
        pin = await store.add(chat_key, text, by="model")
        pins = await store.load(chat_key)
    except PinError as exc:
        return {"success": False, "error": str(exc), "unpin": list(exc.unpin)}
    except (ShipAgentError, OSError) as exc:
        return {"success": False, "error": str(exc)}
    limit = store.config.max_tokens
    return {"success": True, "pinned": pin.to_json(), "tokens": pins_tokens(pins), "maxTokens": limit}


async def context_unpin(run: RunContext[TurnDeps], pin_id: str) -> dict[str, Any]:
    """Remove a pinned fact that no longer holds (the user changed their mind, a decision was undone).

    Args:
        pin_id: the pin's id as "Pinned facts" shows it, like "p3".
    """
    store, chat_key = _store(run)
    try:
        removed = await store.remove(chat_key, pin_id)
        pins = await store.load(chat_key)
    except (ShipAgentError, OSError) as exc:
        return {"success": False, "error": str(exc)}
    if not removed:
        ids = ", ".join(p.id for p in pins) or "none"
        return {"success": False, "error": f"this chat has no pin {pin_id!r}; its pins: {ids}"}
    return {"success": True, "unpinned": normalize_id(pin_id), "remaining": [p.id for p in pins]}


def pins_toolset() -> FunctionToolset[Any]:
    """A new toolset holding ``context_pin`` and ``context_unpin``."""
    return FunctionToolset(
        [context_pin, context_unpin],
        id="shipagent_pins",
        docstring_format="google",
        require_parameter_descriptions=True,
    )
