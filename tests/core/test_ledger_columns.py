"""The ledger's columnar record lines (version 2) and the version-1 lines written before them."""

from __future__ import annotations

import json
from pathlib import Path

from shipagent.agent.ledger import LedgerItem, RequestRecord
from shipagent.agent.ledger._store import LedgerStore
from shipagent.chatkeys import ShipPaths

KEY = "web:user:9"


def _record(items: list[LedgerItem]) -> RequestRecord:
    return RequestRecord(
        request_id="r1",
        step=2,
        ts="2026-11-23T05:00:00.000Z",
        chat_key=KEY,
        model="function:x",
        run_id="run1",
        prefix_hash="abc",
        sections={"history": sum(i.tokens for i in items if i.section == "history")},
        items=items,
        budget={"total": 5000, "caps": {}},
        estimate=900,
        input_tokens=1000,
        cached_tokens=0,
    )


def _items() -> list[LedgerItem]:
    return [
        LedgerItem("summary:s1", "summary", 40, 40),
        LedgerItem(
            "injection:rules",
            "injections",
            64,
            900,
            edit="cut",
            cap=64,
            tool_call_ids=["c1"],
            role="system",
            blob="a" * 64,
        ),
        *[LedgerItem(f"history:{n}", "history", 10 + n, 10 + n) for n in range(1, 400)],
        LedgerItem("history:400", "history", 0, 30, edit="dropped", tool_call_ids=["c0"]),
        LedgerItem("turn:0", "turn", 7, 7),
        LedgerItem(
            "turn:1",
            "toolResults",
            50,
            1200,
            edit="elided",
            hints={"c2": "call `lookup` again"},
            tool_call_ids=["c2"],
        ),
    ]


def test_a_record_round_trips_through_its_columnar_line(tmp_path: Path) -> None:
    record = _record(_items())
    store = LedgerStore(ShipPaths(tmp_path))
    store.append(KEY, [record], {})
    (line,) = store.path(KEY).read_text(encoding="utf-8").splitlines()
    data = json.loads(line)
    assert data["v"] == 2 and "items" not in data
    # 400 plain history items cost one source and one token count each, nothing more
    assert data["cols"]["section"] == [
        ["summary", 1],
        ["injections", 1],
        ["history", 400],
        ["turn", 1],
        ["toolResults", 1],
    ]
    assert sorted(data["cols"]["extra"], key=int) == ["1", "401", "403"]
    (back,) = store.read(KEY)
    assert back == record


def test_version_1_lines_are_still_read(tmp_path: Path) -> None:
    record = _record(_items())
    old = record.to_json()
    del old["cols"]
    old["v"] = 1
    old["items"] = [i.to_json() for i in record.items]
    store = LedgerStore(ShipPaths(tmp_path))
    store.path(KEY).parent.mkdir(parents=True)
    store.path(KEY).write_text(json.dumps(old) + "\n", encoding="utf-8")
    assert store.read(KEY) == [record]


def test_a_line_whose_columns_disagree_is_skipped_not_fatal(tmp_path: Path) -> None:
    store = LedgerStore(ShipPaths(tmp_path))
    good = _record(_items())
    bad = good.to_json()
    bad["cols"]["tokens"] = bad["cols"]["tokens"][:-1]
    store.path(KEY).parent.mkdir(parents=True)
    store.path(KEY).write_text(json.dumps(bad) + "\n" + json.dumps(good.to_json()) + "\n", encoding="utf-8")
    assert store.read(KEY) == [good]
