"""Read-only views of a chat's ledger: one request, the diff from the one before, per-chat stats.

Pure functions over :class:`RequestRecord` s (the CLI in :mod:`._cli` prints them), so they are
tested directly and used by ``bench/ledger_stats.py`` too.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._records import SECTION_NAMES, LedgerItem, RequestRecord

__all__ = ["ItemChange", "diff_records", "find_record", "ledger_stats"]


@dataclass(frozen=True, slots=True)
class ItemChange:
    """One difference between two consecutive requests."""

    change: str
    """``added``, ``removed`` or ``edited``."""
    source: str
    before: LedgerItem | None
    after: LedgerItem | None


def find_record(
    records: Sequence[RequestRecord], request: str | None, unreadable: Mapping[str, str] | None = None
) -> RequestRecord:
    """The record named ``<requestId>`` (its last step) or ``<requestId>:<step>``; the newest if None.

    ``unreadable``: ``<requestId>:<step>`` -> why, of the lines that could not be read
    (``LedgerStore.scan``), so asking for one of those says why instead of "no such record".

    Raises:
        KeyError: no such record (the message names what was asked for).
    """
    if request is None:
        if not records:
            why = next(iter((unreadable or {}).values()), None)
            raise KeyError(
                f"this chat has no readable ledger records: {why}"
                if why
                else "this chat has no ledger records yet"
            )
        return records[-1]
    request_id, _, step = request.partition(":")
    matches = [r for r in records if r.request_id == request_id and (not step or str(r.step) == step)]
    newest = matches[-1].step if matches else 0
    for ident, reason in (unreadable or {}).items():
        name, _, number = ident.partition(":")
        # asked for that step, or for the request's last step and that one is the unreadable one
        if ident == request or (
            not step and name == request_id and number.isdigit() and int(number) > newest
        ):
            raise KeyError(reason)
    if not matches:
        raise KeyError(f"no ledger record {request!r} in this chat")
    return matches[-1]


def previous_of(records: Sequence[RequestRecord], record: RequestRecord) -> RequestRecord | None:
    for index, candidate in enumerate(records):
        if candidate is record:
            return records[index - 1] if index else None
    return None


def diff_records(before: RequestRecord | None, after: RequestRecord) -> list[ItemChange]:
    """Items added, removed or edited (edit or token count changed) from ``before`` to ``after``."""
    old = {i.source: i for i in before.items} if before is not None else {}
    new = {i.source: i for i in after.items}
    changes: list[ItemChange] = []
    for source, item in new.items():
        was = old.get(source)
        if was is None or (was.edit == "dropped") != (item.edit == "dropped"):
            if item.edit != "dropped":
                changes.append(ItemChange("added", source, was, item))
            elif was is not None:
                changes.append(ItemChange("removed", source, was, item))
        elif (was.edit, was.tokens) != (item.edit, item.tokens):
            changes.append(ItemChange("edited", source, was, item))
    changes.extend(
        ItemChange("removed", s, i, None) for s, i in old.items() if s not in new and i.edit != "dropped"
    )
    return changes


def ledger_stats(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Per chat: requests, turns, mean tokens per section, prefix-stable and cached-token shares,
    the provider's input and cached tokens (over the requests it reported them for) and the cache
    busts by reason and by section (records from before busts were kept count none)."""
    count = len(records)
    means = {
        name: (sum(r.sections.get(name, 0) for r in records) / count if count else 0.0)
        for name in SECTION_NAMES
    }
    stable = sum(1 for a, b in itertools.pairwise(records) if a.prefix_hash == b.prefix_hash)
    reported = [r for r in records if r.input_tokens]
    input_tokens = sum(r.input_tokens or 0 for r in reported)
    cached = sum(r.cached_tokens or 0 for r in reported)
    edits: dict[str, int] = {}
    for record in records:
        for item in record.items:
            edits[item.edit] = edits.get(item.edit, 0) + 1
    by_reason: dict[str, int] = {}
    by_section: dict[str, int] = {}
    for bust in (r.bust for r in records if r.bust):
        reason, section = bust.get("reason", "?"), bust.get("section", "?")
        by_reason[reason] = by_reason.get(reason, 0) + 1
        by_section[section] = by_section.get(section, 0) + 1
    return {
        "requests": count,
        "turns": len({r.request_id for r in records}),
        "meanTokens": {k: round(v, 1) for k, v in means.items()},
        "meanTotalTokens": round(sum(means.values()), 1),
        "prefixStableShare": round(stable / (count - 1), 4) if count > 1 else None,
        "distinctPrefixes": len({r.prefix_hash for r in records}),
        "providerReported": len(reported),
        "inputTokens": input_tokens if reported else None,
        "cachedTokens": cached if reported else None,
        "cachedTokenShare": round(cached / input_tokens, 4) if input_tokens else None,
        "busts": {
            "total": sum(by_reason.values()),
            "byReason": dict(sorted(by_reason.items())),
            "bySection": dict(sorted(by_section.items())),
        },
        "edits": edits,
    }
