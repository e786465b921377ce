"""A turn's commit, idempotent by request id: every store gets the turn exactly once.

DBOS records a step after it returns. A worker killed while the commit step runs leaves some
stores written and the step unrecorded, so the resumed turn runs the commit again. Before writing,
each store is asked whether it already holds this request id (the newest few records are enough:
per-chat order means nothing of this chat was committed after it); only the missing ones are
written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .. import jsonl
from .._steps import call_outcomes
from ..turns import CommitOutcome, TurnCommit

if TYPE_CHECKING:
    from ..agent import ShipAgent

__all__ = ["commit_once", "last_request_id", "stores_holding"]

_SCAN = 64


def last_request_id(path: Path) -> str | None:
    """The request id of the newest record in a JSONL store (``None`` when empty or absent)."""
    for record in jsonl.iter_objects_backward(path):
        if isinstance(record, dict) and isinstance(record.get("requestId"), str):
            return str(record["requestId"])
    return None


def _holds(path: Path, request_id: str, scan: int = _SCAN) -> bool:
    for index, record in enumerate(jsonl.iter_objects_backward(path)):
        if index >= scan:
            return False
        if isinstance(record, dict) and record.get("requestId") == request_id:
            return True
    return False


async def _cards_hold(agent: ShipAgent, chat_key: str, request_id: str) -> bool:
    store = agent.handover.store
    box = await store.get_box(await agent.handover.output_box_id(chat_key))
    cards = await store.get_cards(box.card_ids[-4:])
    return any((card.metadata or {}).get("request_id") == request_id for card in cards)


async def stores_holding(agent: ShipAgent, chat_key: str, request_id: str) -> set[str]:
    """Which stores already hold ``request_id``: ``messages``, ``transcript``, ``agentContext``, ``cards``."""

    def files() -> set[str]:
        found = set()
        if _holds(agent.chats.log.path(chat_key), request_id, 8):
            found.add("messages")
        if _holds(agent.transcript.path(chat_key), request_id):
            found.add("transcript")
        if _holds(agent.agent_context.path(chat_key), request_id, 8):
            found.add("agentContext")
        return found

    found = await anyio.to_thread.run_sync(files)
    try:
        if await _cards_hold(agent, chat_key, request_id):
            found.add("cards")
    except Exception:  # the card store is best effort in the plain commit too
        pass
    return found


async def commit_once(
    agent: ShipAgent, turn: TurnCommit, commit: Callable[[TurnCommit], Awaitable[CommitOutcome]]
) -> CommitOutcome:
    """Commit ``turn`` to whichever stores do not hold it yet (all of them, normally)."""
    present = await stores_holding(agent, turn.chat_key, turn.request_id)
    if not present:
        return await commit(turn)

    def logs() -> None:
        if "transcript" not in present:
            agent.transcript.append_turn(turn.chat_key, turn.request_id, turn.text, turn.said, sent=turn.sent)
        if "agentContext" not in present:
            calls = call_outcomes(turn.records)
            agent.agent_context.append(turn.chat_key, turn.request_id, turn.text, turn.output, calls)

    compaction = None
    try:
        if "messages" not in present:
            compaction = await agent.chats.commit(
                turn.chat_key,
                turn.request_id,
                turn.base,
                turn.new,
                base_compaction=turn.base_compaction,
                also=logs,
            )
        else:
            await anyio.to_thread.run_sync(logs)
            agent.chats.clear_memory(turn.chat_key)  # the history on disk is the truth
    except Exception as exc:
        return None, exc
    if "cards" not in present:
        await agent.handover.record_turn(turn.chat_key, turn.request_id, turn.text, turn.output)
    return compaction, None
