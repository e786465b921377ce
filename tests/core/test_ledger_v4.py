"""Ledger lines of version 4: spliced onto their base by recorded values, checked by fingerprint.

Version 3 chose the items a line copies from its base by object identity (the context window
reuses history items from one request to the next), which was right only while nothing edited a
reused item in place. These tests pin what version 4 promises instead: an item edited in place
is recorded as it is now, a line reads back as its whole encoding, a base that is not the one a
line was written against is caught by its fingerprint, and version-3 lines still load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent.agent.ledger._encode import Base, encode_report
from shipagent.agent.ledger._records import items_fingerprint, record_from_report
from shipagent.agent.ledger._store import LedgerStore
from shipagent.chatkeys import ShipPaths
from shipagent.window.budget import Budget, Plan
from shipagent.window.placement import RequestReport
from shipagent.window.sections import Item

KEY = "web:user:v4"


def _history(seq: int, tokens: int = 40) -> Item:
    message = (
        ModelRequest(parts=[UserPromptPart(f"q{seq}")])
        if seq % 2
        else ModelResponse(parts=[TextPart(f"a{seq}")])
    )
    return Item(message, "history", f"history:{seq}", (), "whole", None, {}, tokens, tokens)


def _report(prior: list[Item], step: int = 1) -> RequestReport:
    current = [
        Item(ModelRequest(parts=[UserPromptPart("now")]), "turn", "turn:0", (), "whole", None, {}, 5, 5)
    ]
    return RequestReport(
        run_id=f"run{step}",
        step=step,
        model="function:x",
        plan=Plan([*prior, *current], Budget(50_000, {})),
        prior=prior,
        injections=[],
        current=current,
        prefix_hash="p",
        instruction_tokens=10,
        tool_tokens=20,
        messages=[],
        estimate=100,
        ratio=1.0,
    )


def _write(
    tmp_path: Path, reports: list[RequestReport]
) -> tuple[LedgerStore, list[dict[str, Any]], list[Any]]:
    """``reports`` written as the ledger writes them (each against the one before), and the
    records a whole encoding of each report gives — taken right after it was written."""
    store = LedgerStore(ShipPaths(tmp_path))
    base: Base | None = None
    lines, expected = [], []
    for n, report in enumerate(reports):
        line, base = encode_report(report, base, request_id=f"r{n}", chat_key=KEY, ts="t", blobs={})
        store.append_lines(KEY, [line], {})
        lines.append(line)
        expected.append(record_from_report(report, request_id=f"r{n}", chat_key=KEY, ts="t", blobs={}))
    return store, lines, expected


def test_a_new_line_names_its_base_and_its_fingerprint_and_reads_back_whole(tmp_path: Path) -> None:
    prior = [_history(n) for n in range(1, 201)]
    store, lines, expected = _write(tmp_path, [_report(prior), _report([*prior, _history(201)])])
    first, second = lines
    assert first["v"] == 2 and "base" not in first
    assert second["v"] == 4 and second["base"] == "r0:1" and second["cols"]["copy"] == [[0, 0, 200]]
    assert second["baseFp"] == items_fingerprint(expected[0].items)
    records, unreadable = store.scan(KEY)
    assert unreadable == {} and records == expected


def test_an_item_edited_in_place_between_requests_is_recorded_as_it_is_now(tmp_path: Path) -> None:
    """The same list and the same item objects, one of them changed in place: the second line
    must not say "as in the base" for it (version 3 did, by identity)."""
    prior = [_history(n, tokens=30) for n in range(1, 11)]
    first = _report(list(prior))
    store = LedgerStore(ShipPaths(tmp_path))
    line1, base = encode_report(first, None, request_id="r0", chat_key=KEY, ts="t", blobs={})
    want1 = record_from_report(first, request_id="r0", chat_key=KEY, ts="t", blobs={})
    reused = prior[4]
    reused.edit, reused.cap, reused.tokens = "cut", 7, 7  # another package edits the reused item
    reused.hints["c1"] = "context_read(id='x')"
    second = _report(prior)
    assert second.prior[4] is reused
    line2, _ = encode_report(second, base, request_id="r1", chat_key=KEY, ts="t", blobs={})
    want2 = record_from_report(second, request_id="r1", chat_key=KEY, ts="t", blobs={})
    store.append_lines(KEY, [line1, line2], {})
    assert line2["v"] == 4 and [c[2] for c in line2["cols"]["copy"]] == [4, 5]  # around the edit
    records, unreadable = store.scan(KEY)
    assert unreadable == {}
    assert records[0] == want1 and records[1] == want2
    assert (records[1].items[4].edit, records[1].items[4].tokens, records[1].items[4].cap) == ("cut", 7, 7)
    assert records[1].items[4].hints == {"c1": "context_read(id='x')"}
    assert records[0].items[4].edit == "whole" and records[0].items[4].tokens == 30


def test_hints_edited_in_place_are_noticed_too(tmp_path: Path) -> None:
    item = _history(1)
    item.edit, item.hints, item.tokens = "elided", {"c1": "first"}, 3
    prior = [_history(0), item]
    _, base = encode_report(_report(list(prior)), None, request_id="a", chat_key=KEY, ts="t", blobs={})
    item.hints["c1"] = "second"
    again, _ = encode_report(_report(prior), base, request_id="b", chat_key=KEY, ts="t", blobs={})
    assert again["v"] == 4 and again["cols"]["copy"] == [[0, 0, 1]]
    assert again["cols"]["extra"]["0"]["hints"] == {"c1": "second"}


def test_a_base_with_other_items_of_the_same_count_is_caught_by_its_fingerprint(tmp_path: Path) -> None:
    prior = [_history(n) for n in range(1, 31)]
    store, lines, _ = _write(tmp_path, [_report(prior), _report([*prior, _history(31)])])
    changed = json.loads(json.dumps(lines[0]))
    changed["cols"]["tokens"][3] += 1  # same count, another record
    store.path(KEY).write_text("".join(json.dumps(x) + "\n" for x in [changed, lines[1]]), encoding="utf-8")
    records, unreadable = store.scan(KEY)
    assert [r.request_id for r in records] == ["r0"]
    assert "r1:1" in unreadable and "fingerprint" in unreadable["r1:1"] and "r0:1" in unreadable["r1:1"]


def test_version_3_lines_still_load(tmp_path: Path) -> None:
    """A version-3 line is a version-4 line without ``baseFp`` (the splice is the same)."""
    prior = [_history(n) for n in range(1, 21)]
    store, lines, expected = _write(tmp_path, [_report(prior), _report([*prior, _history(21)])])
    old = json.loads(json.dumps(lines[1]))
    old["v"] = 3
    del old["baseFp"]
    store.path(KEY).write_text("".join(json.dumps(x) + "\n" for x in [lines[0], old]), encoding="utf-8")
    records, unreadable = store.scan(KEY)
    assert unreadable == {} and records == expected
