"""A finished turn becomes ONE record in the chat's store.

Between the turn (``_turn.py``, which says what happened) and the store (``stores``, which keeps
it): the compaction is decided first (``ChatHistories.plan``: pure, from the history and the
ship.json bounds), so the turn's messages, transcript lines, agent-context entry, cards, ledger
records and compaction are one :class:`~shipagent.store.TurnRecord`. The store writes every part
it does not hold yet, so a durable worker that commits the same request id again completes the
turn and writes nothing twice.
"""

from __future__ import annotations

import logging

from .._steps import call_outcomes
from ..store._protocols import ChatStore, TurnRecord
from ..store.chats import ChatHistories
from .ledger import Ledger
from .turns import CommitOutcome, TurnCommit

__all__ = ["commit_turn"]

log = logging.getLogger("shipagent")


async def commit_turn(
    chats: ChatHistories, ledger: Ledger, store: ChatStore, turn: TurnCommit, *, fresh: bool = False
) -> CommitOutcome:
    """Write ``turn`` to ``store``; returns the compaction it triggered, or the failure that kept it out.

    ``fresh``: the turn's request id was minted for it, so no store can hold it: nothing is asked.
    """
    key, rid = turn.chat_key, turn.request_id
    summarize = True
    # a replay asks the summarizer nothing again (a minted request id cannot be a replay)
    if not fresh and chats.over_bound([*turn.base, *turn.new]):
        summarize = (await store.last_committed(key)).request_id != rid
    plan = await chats.plan(key, turn.base, turn.new, turn.base_compaction, summarize=summarize)
    compacted_base = turn.base_compaction is not None
    record = TurnRecord(
        key,
        rid,
        turn.text,
        turn.output,
        plan.new,
        sent=list(turn.sent),
        tool_calls=call_outcomes(turn.records),
        base_compaction=turn.base if compacted_base else None,
        compaction=plan.done.history if plan.done is not None else None,
        said=turn.said,
        seq=plan.first_seq,
        base_sources=plan.before if compacted_base else None,
        compaction_sources=plan.final_sources if plan.done is not None else None,
        removed=plan.removed,
        ledger=ledger.flush(key, rid, turn.new),
        fresh=fresh,
        sender=turn.sender,
    )
    try:
        report = await store.commit(record)
    except Exception as exc:  # disk full, permissions, the database refused: the turn did not stick
        chats.clear_memory(key)  # part of it may be written: the next turn re-reads the truth
        return None, exc
    if report.replayed:  # committed by an earlier attempt: the store's history is the truth
        loaded = await store.load(key)
        chats.install(key, loaded.messages, loaded.sources, loaded.next_seq)
        return None, None
    for part, error in report.failed.items():
        log.error(
            "chat %r: turn %s is saved, but writing its transcript/logs failed (%s: %s: %s); "
            "they are rebuilt from the message log before the next turn",
            key,
            rid,
            part,
            type(error).__name__,
            error,
        )
    chats.committed(key, plan, behind=bool(report.failed))
    return plan.done, None
