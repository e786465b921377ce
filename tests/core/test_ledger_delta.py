"""Version-3 ledger lines (a request written against the chat's previous record) read back exactly.

Property-style: seeded random chats of requests — growing history (the same items, as the
context window reuses them), fresh and value-equal items, summaries arriving and compaction,
injected system and assistant messages, cut / elided / dropped items with tool call ids — are
encoded as a chain of lines, and every record read back must equal the record the whole
(version-2) encoding gives for the same request.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from shipagent.agent.ledger import LedgerReferenceError, RequestRecord
from shipagent.agent.ledger._encode import WHOLE_EVERY, Base, encode_report
from shipagent.agent.ledger._inspect import find_record
from shipagent.agent.ledger._records import record_from_report
from shipagent.agent.ledger._store import LedgerStore
from shipagent.chatkeys import ShipPaths
from shipagent.window.budget import Budget, Plan
from shipagent.window.placement import RequestReport
from shipagent.window.sections import Item

KEY = "web:user:delta"


class Chat:
    """A random chat as the context window would report it, request after request."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seq = 0
        self.prior: list[Item] = [self._history() for _ in range(rng.randint(0, 40))]

    def _message(self, text: str) -> ModelMessage:
        if self.rng.random() < 0.5:
            return ModelRequest(parts=[UserPromptPart(text)])
        return ModelResponse(parts=[TextPart(text)])

    def _edited(self, item: Item) -> Item:
        """``item`` as a plan might have edited it (always a fresh object, as the window makes)."""
        kind = self.rng.choice(["whole", "cut", "elided", "dropped", "ids"])
        tokens = item.original_tokens
        if kind == "cut":
            return dataclasses.replace(item, edit="cut", cap=64, tokens=min(tokens, 64))
        if kind == "elided":
            call = f"c{self.rng.randint(0, 999)}"
            hints = {call: f"context_read(id='h{call}')"}
            return dataclasses.replace(item, edit="elided", hints=hints, tool_call_ids=(call,), tokens=9)
        if kind == "dropped":
            return dataclasses.replace(item, edit="dropped", tokens=0, tool_call_ids=("c1", "c2"))
        if kind == "ids":
            return dataclasses.replace(item, tool_call_ids=(f"c{self.rng.randint(0, 9)}",))
        return dataclasses.replace(item)  # equal by value, another object

    def _history(self) -> Item:
        self.seq += 1
        tokens = self.rng.randint(1, 400)
        message = self._message(f"message {self.seq}")
        return Item(message, "history", f"history:{self.seq}", (), "whole", None, {}, tokens, tokens)

    def _summary(self) -> Item:
        self.seq += 1
        message = ModelRequest(parts=[SystemPromptPart(f"summary {self.seq}")])
        return Item(message, "summary", f"summary:s{self.seq}", (), "whole", None, {}, 50, 50)

    def _injection(self, system: bool, n: int) -> Item:
        text = f"injected {'system' if system else 'assistant'} {n} " + "x" * self.rng.randint(0, 30)
        message: ModelMessage = (
            ModelRequest(parts=[SystemPromptPart(text)]) if system else ModelResponse(parts=[TextPart(text)])
        )
        item = Item(message, "injections", f"injection:fp{n}", (f"r{n}",), "whole", None, {}, 20, 20)
        return self._edited(item) if self.rng.random() < 0.3 else item

    def step(self) -> None:
        """Change the history as the next request might see it."""
        rng = self.rng
        for _ in range(rng.randint(0, 3)):
            self.prior.append(self._history())
        roll = rng.random()
        if roll < 0.1 and len(self.prior) > 4:  # compaction: a summary and the last few
            self.prior = [self._summary(), *self.prior[-rng.randint(1, 4) :]]
        elif roll < 0.2 and self.prior and self.prior[0].section == "summary":  # fused anew
            self.prior = [dataclasses.replace(self.prior[0]), *self.prior[1:]]
        elif roll < 0.4 and self.prior:  # a few positions fresh or edited (over the budget)
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(self.prior))
                if self.prior[at].section == "history":
                    self.prior = [*self.prior[:at], self._edited(self.prior[at]), *self.prior[at + 1 :]]
        elif roll < 0.45:
            self.prior = [dataclasses.replace(i) for i in self.prior]  # all fresh, all equal

    def report(self, step: int) -> RequestReport:
        rng = self.rng
        injections = [self._injection(rng.random() < 0.6, n) for n in range(rng.choice([0, 0, 1, 2, 3]))]
        current = [
            Item(self._message("the question"), "turn", "turn:0", (), "whole", None, {}, 12, 12),
            *(
                self._edited(
                    Item(self._message(f"result {n}"), "toolResults", f"turn:{n}", (f"t{n}",), tokens=80)
                )
                for n in range(1, rng.randint(1, 4))
            ),
        ]
        prior = list(self.prior)
        items = [*prior, *injections, *current]
        caps = {"history": 900} if rng.random() < 0.2 else {}
        return RequestReport(
            run_id=f"run{step}",
            step=step,
            model="function:x",
            plan=Plan(items, Budget(5000, caps)),
            prior=prior,
            injections=injections,
            current=current,
            prefix_hash="p",
            instruction_tokens=100,
            tool_tokens=200,
            messages=[],
            estimate=777,
            ratio=1.25,
        )


def _encode_chat(
    seed: int, tmp_path: Path, requests: int = 40
) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
    """A random chat's requests written as the ledger writes them; the records a whole encoding gives."""
    rng = random.Random(seed)
    chat = Chat(rng)
    store = LedgerStore(ShipPaths(tmp_path))
    expected: list[RequestRecord] = []
    lines: list[dict[str, Any]] = []
    base: Base | None = None
    turn, step = 0, 0
    for n in range(requests):
        if n == 0 or rng.random() < 0.4:
            turn, step = turn + 1, 0
        step += 1
        chat.step()
        report = chat.report(step)
        usage = (rng.randint(1, 9999), 0) if rng.random() < 0.5 else None
        if rng.random() < 0.05:
            base = None  # a fresh file or a new process: a whole line
        blobs: dict[str, str] = {}
        line, base = encode_report(
            report, base, request_id=f"req{turn}", chat_key=KEY, ts=f"t{n}", blobs=blobs, usage=usage
        )
        store.append_lines(KEY, [line], blobs)
        lines.append(line)
        want_blobs: dict[str, str] = {}
        want = record_from_report(report, request_id=f"req{turn}", chat_key=KEY, ts=f"t{n}", blobs=want_blobs)
        if usage is not None:
            want.input_tokens, want.cached_tokens = usage
        assert blobs == want_blobs
        expected.append(want)
    return expected, lines


@pytest.mark.parametrize("seed", range(25))
def test_every_record_of_a_random_chat_reads_back_as_its_whole_encoding(seed: int, tmp_path: Path) -> None:
    expected, _ = _encode_chat(seed, tmp_path)
    store = LedgerStore(ShipPaths(tmp_path))
    records, unreadable = store.scan(KEY)
    assert unreadable == {}
    assert records == expected
    # and the API's JSON form (``shipagent inspect --json``) is the whole version-2 line
    assert [r.to_json() for r in records] == [e.to_json() for e in expected]


def test_the_random_chats_exercise_what_the_encoding_must_handle(tmp_path: Path) -> None:
    seen: dict[str, int] = {}
    for seed in range(25):
        expected, lines = _encode_chat(seed, tmp_path / str(seed))
        for line in lines:
            seen[f"v{line['v']}"] = seen.get(f"v{line['v']}", 0) + 1
            if line["v"] == 4:
                seen["runs"] = seen.get("runs", 0) + len(line["cols"]["copy"])
        for record in expected:
            for item in record.items:
                seen[item.edit] = seen.get(item.edit, 0) + 1
                seen[item.section] = seen.get(item.section, 0) + 1
    for needed in ("v2", "v4", "cut", "elided", "dropped", "summary", "injections", "toolResults"):
        assert seen.get(needed, 0) > 5, (needed, seen)
    assert seen["runs"] > seen["v4"]  # some lines copy more than one run (fresh items in between)


def test_a_line_written_against_its_base_is_small_and_says_so(tmp_path: Path) -> None:
    rng = random.Random(7)
    chat = Chat(rng)
    chat.prior = [chat._history() for _ in range(1000)]
    store = LedgerStore(ShipPaths(tmp_path))
    first, base = encode_report(chat.report(1), None, request_id="r1", chat_key=KEY, ts="t", blobs={})
    chat.prior.extend([chat._history(), chat._history()])
    report = chat.report(1)
    second, _ = encode_report(report, base, request_id="r2", chat_key=KEY, ts="t", blobs={})
    store.append_lines(KEY, [first, second], {})
    assert first["v"] == 2 and "base" not in first
    assert second["v"] == 4 and second["base"] == "r1:1"
    assert second["cols"]["copy"] == [[0, 0, 1000]] or second["cols"]["copy"][0][2] >= 1000
    assert len(json.dumps(second)) < 2000 < 15000 < len(json.dumps(first))
    assert (
        store.read(KEY)[1].items[:1002]
        == record_from_report(report, request_id="r2", chat_key=KEY, ts="t", blobs={}).items[:1002]
    )


def _chain(tmp_path: Path) -> tuple[LedgerStore, list[dict[str, Any]]]:
    """Three requests of one chat: a whole line, then two lines each against the one before."""
    rng = random.Random(3)
    chat = Chat(rng)
    chat.prior = [chat._history() for _ in range(30)]
    lines: list[dict[str, Any]] = []
    base = None
    for n in range(3):
        chat.prior.append(chat._history())
        line, base = encode_report(chat.report(1), base, request_id=f"q{n}", chat_key=KEY, ts="t", blobs={})
        lines.append(line)
    assert [line["v"] for line in lines] == [2, 4, 4]
    store = LedgerStore(ShipPaths(tmp_path))
    store.path(KEY).parent.mkdir(parents=True)
    return store, lines


def _write(store: LedgerStore, lines: list[Any]) -> None:
    store.path(KEY).write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")


def test_a_missing_base_leaves_the_record_out_and_says_which(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, lines = _chain(tmp_path)
    _write(store, [lines[0], lines[2]])  # the base of q2 is gone
    records, unreadable = store.scan(KEY)
    assert [r.request_id for r in records] == ["q0"]
    why = unreadable["q2:1"]
    assert why == (
        f"ledger record q2:1 of chat {KEY!r} refers to ledger record q1:1, which is missing or unreadable"
    )
    assert why in caplog.text
    with pytest.raises(LedgerReferenceError):
        RequestRecord.from_json(lines[2], {})


def test_a_damaged_base_makes_every_line_after_it_unreadable_not_wrong(tmp_path: Path) -> None:
    store, lines = _chain(tmp_path)
    damaged = json.loads(json.dumps(lines[1]))
    damaged["cols"]["tokens"] = damaged["cols"]["tokens"][:-1]  # its columns no longer agree
    _write(store, [lines[0], damaged, lines[2]])
    records, unreadable = store.scan(KEY)
    assert [r.request_id for r in records] == ["q0"]
    assert "ledger columns disagree" in unreadable["q1:1"] and "q1:1" in unreadable["q1:1"]
    assert "refers to ledger record q1:1, which is missing or unreadable" in unreadable["q2:1"]


def test_a_base_that_is_not_the_one_written_against_is_caught(tmp_path: Path) -> None:
    store, lines = _chain(tmp_path)
    other = json.loads(json.dumps(lines[1]))
    other["cols"]["baseN"] += 1  # as if q0:1 had held another item
    _write(store, [lines[0], other, lines[2]])
    records, unreadable = store.scan(KEY)
    assert [r.request_id for r in records] == ["q0"]
    assert unreadable["q1:1"].startswith(
        f"ledger record q1:1 of chat {KEY!r} refers to ledger record q0:1 with"
    )
    overrun = json.loads(json.dumps(lines[1]))
    overrun["cols"]["copy"][0][2] += 500  # a run past the end of its base
    _write(store, [lines[0], overrun])
    assert "does not fit" in store.scan(KEY)[1]["q1:1"]


def test_a_base_of_the_same_id_written_again_is_the_one_before_the_line(tmp_path: Path) -> None:
    store, lines = _chain(tmp_path)
    _write(store, [lines[0], lines[1], lines[2], lines[0], lines[1]])  # a turn replayed
    records, unreadable = store.scan(KEY)
    assert unreadable == {} and [r.request_id for r in records] == ["q0", "q1", "q2", "q0", "q1"]
    assert records[4] == records[1]


@pytest.mark.parametrize("heads", ["same summary", "summary, then none", "none, then summary"])
def test_runs_that_cross_where_the_summary_ends_are_split(heads: str, tmp_path: Path) -> None:
    """The summary is sent before the injected system messages, the history after them: a run of
    the same items must not span both, in the request or in its base."""
    chat = Chat(random.Random(11))
    history = [chat._history() for _ in range(12)]
    summary, plain = chat._summary(), chat._history()
    firsts = {
        "same summary": [summary, summary],
        "summary, then none": [summary, plain],
        "none, then summary": [plain, summary],
    }[heads]
    store = LedgerStore(ShipPaths(tmp_path))
    expected: list[RequestRecord] = []
    base = None
    for n, first in enumerate(firsts):
        chat.prior = [first, *history]
        report = chat.report(n + 1)
        systems = [chat._injection(True, k) for k in range(2 - n)]  # two, then one
        report.injections = [*systems, chat._injection(False, 3)]
        report.plan = Plan([*report.prior, *report.injections, *report.current], Budget(5000))
        blobs: dict[str, str] = {}
        line, base = encode_report(report, base, request_id="r", chat_key=KEY, ts="t", blobs=blobs)
        store.append_lines(KEY, [line], blobs)
        expected.append(record_from_report(report, request_id="r", chat_key=KEY, ts="t", blobs={}))
    assert line["v"] == 4 and sum(c[2] for c in line["cols"]["copy"]) == (
        13 if heads == "same summary" else 12
    )
    assert store.read(KEY) == expected


def test_a_whole_line_comes_at_least_every_so_many_lines(tmp_path: Path) -> None:
    chat = Chat(random.Random(5))
    chat.prior = [chat._history() for _ in range(20)]
    base = None
    kinds = []
    for n in range(2 * (WHOLE_EVERY + 1) + 2):
        line, base = encode_report(chat.report(1), base, request_id=f"q{n}", chat_key=KEY, ts="t", blobs={})
        kinds.append(line["v"])
    assert kinds == ([2] + [4] * WHOLE_EVERY) * 2 + [2, 4]


def test_asking_for_an_unreadable_record_says_why_instead_of_giving_another(tmp_path: Path) -> None:
    store, lines = _chain(tmp_path)
    second = json.loads(json.dumps(lines[1]))
    second["requestId"] = "q0"  # q0's second step, against its first
    second["step"] = 2
    third = json.loads(json.dumps(lines[2]))
    third["base"] = "q0:2"
    third["cols"]["baseN"] += 1  # damaged
    _write(store, [lines[0], second, third])
    records, unreadable = store.scan(KEY)
    assert [r.id for r in records] == ["q0:1", "q0:2"]
    assert find_record(records, "q0", unreadable).id == "q0:2"
    assert find_record(records, "q0:1", unreadable).id == "q0:1"
    with pytest.raises(KeyError) as raised:
        find_record(records, "q2", unreadable)
    assert raised.value.args[0] == unreadable["q2:1"] and "q0:2" in unreadable["q2:1"]
    second["cols"]["n"] += 1  # now the request's last step is unreadable too
    _write(store, [lines[0], second])
    records, unreadable = store.scan(KEY)
    with pytest.raises(KeyError) as raised:
        find_record(records, "q0", unreadable)  # not its first step, silently
    assert "q0:2" in raised.value.args[0]
    with pytest.raises(KeyError, match="no readable ledger records: ledger record q0:2"):
        find_record([], None, unreadable)
