"""Version-3 ledger lines in a real chat: what the API, ``reconstruct`` and the CLI return is unchanged.

Also: a ledger written before version 3 (a committed fixture) stays readable and reconstructable
and new turns append to it; a fresh file, or one replaced or cut short under the process, starts
with a whole line; a line whose base is gone is an error naming the chat and both records.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from typer.testing import CliRunner

from shipagent import ShipAgent, current_tool_context
from shipagent.agent.ledger import RequestRecord
from shipagent.agent.ledger._ledger import LedgerRecorder
from shipagent.agent.ledger._records import record_from_report
from shipagent.hosts.cli import _app as cli
from shipagent.window.placement import RequestReport
from tests.support.core import last_user_text
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.anyio
KEY = "web:user:delta"
FIXTURE = FIXTURES / "ledger_v2"
runner = CliRunner()


def lookup(n: int) -> str:
    """A result."""
    return f"RESULT-{n} " + " ".join(f"fact{n}x{j}" for j in range(40))


def load_rules() -> str:
    """Injects rules and an earlier exchange."""
    ctx = current_tool_context()
    ctx.inject_system_message_once("RULES: be kind, cite sources.", fingerprint="rules-v1")
    ctx.inject_assistant_message_once("EARLIER: you asked about pizza", fingerprint="pizza")
    return "rules loaded"


class Model:
    """Scripted: ``lookup …`` and ``rules …`` turns call a tool first; records what it received."""

    def __init__(self) -> None:
        self.received: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        last, text = messages[-1], last_user_text(messages)
        returned = isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)
        n = len(self.received)
        if text.startswith("lookup") and not returned:
            return ModelResponse(parts=[ToolCallPart("lookup", {"n": n}, tool_call_id=f"l{n}")])
        if text.startswith("rules") and not returned:
            return ModelResponse(parts=[ToolCallPart("load_rules", {}, tool_call_id=f"r{n}")])
        return ModelResponse(parts=[TextPart(f"answer to {text[:20]}")])


class Reports:
    """Every report the ledger's recorder is handed, with the turn it belongs to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, RequestReport]] = []
        original = LedgerRecorder.on_request

        def on_request(recorder: LedgerRecorder, report: RequestReport) -> None:
            self.seen.append((recorder.request_id, report))
            original(recorder, report)

        monkeypatch.setattr(LedgerRecorder, "on_request", on_request)

    def whole(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """The records the whole (version-2) encoding gives for the same requests."""
        out = []
        for (request_id, report), record in zip(self.seen, records, strict=True):
            want = record_from_report(report, request_id=request_id, chat_key=KEY, ts=record.ts, blobs={})
            want.input_tokens, want.cached_tokens = record.input_tokens, record.cached_tokens
            want.config_hash, want.bust = record.config_hash, record.bust  # the chat's, not the report's
            out.append(want)
        return out


def _agent(root: Path, model: Model, ship: dict[str, Any] | None = None) -> ShipAgent:
    bounds = {"inMemoryMaxMessages": 12, "compactKeepLastMessages": 5, "maxHistoryTokens": 10**6}
    (root / "ship.json").write_text(
        json.dumps(ship or {"context": {"chatHistory": bounds}}), encoding="utf-8"
    )
    return ShipAgent.from_project(
        root, model=FunctionModel(model), toolsets=[FunctionToolset([lookup, load_rules])]
    )


def _lines(root: Path, name: str = "requests.jsonl") -> list[dict[str, Any]]:
    path = root / ".ship" / "chats" / "web%3Auser%3Adelta" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


TURNS = ["hello", "lookup one", "rules please", "plain", "lookup two", "more", "rules again", "bye"] * 3


async def test_a_chat_written_against_each_previous_record_reads_and_rebuilds_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports, model = Reports(monkeypatch), Model()
    agent = _agent(tmp_path, model)
    for text in TURNS:
        assert (await agent.run(KEY, text)).success
    records = agent.ledger(KEY)
    assert len(records) == len(model.received) == len(reports.seen)
    assert records == reports.whole(records)  # items, sources, tokens, sections, edits, extras
    lines = _lines(tmp_path)
    assert lines[0]["v"] == 2 and "base" not in lines[0]
    written_against = [line for line in lines if line["v"] == 4]
    assert len(written_against) > len(lines) // 2
    ids = [f"{line['requestId']}:{line['step']}" for line in lines]
    for n, line in enumerate(lines):
        if "base" in line:
            assert line["base"] == ids[n - 1]  # the record just before, in the same file
    assert {s.partition(":")[0] for r in records for i in r.items for s in [i.source]} == {
        "history",
        "summary",
        "injection",
        "turn",
    }
    restarted = ShipAgent.from_project(tmp_path, model=FunctionModel(model))
    for record, received in zip(records, model.received, strict=True):
        assert restarted.reconstruct(KEY, record.request_id, record.step) == received, record.id
    shown = runner.invoke(
        cli.app, ["inspect", KEY, "-C", str(tmp_path), "--request", records[-2].id, "--json"]
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == records[-2].to_json()


def _dump_hash(messages: list[ModelMessage]) -> str:
    return hashlib.sha256(ModelMessagesTypeAdapter.dump_json(messages)).hexdigest()


async def test_a_ledger_written_before_version_3_stays_readable_and_takes_new_turns(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "ship", tmp_path / ".ship")
    shutil.copy(FIXTURE / "ship.json", tmp_path / "ship.json")
    old_key = "web:user:old"
    model = Model()
    agent = ShipAgent.from_project(
        tmp_path, model=FunctionModel(model), toolsets=[FunctionToolset([lookup, load_rules])]
    )
    expected = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    received = json.loads((FIXTURE / "received.json").read_text(encoding="utf-8"))
    old = agent.ledger(old_key)
    assert [r.to_json() for r in old] == expected
    assert {i.source.partition(":")[0] for r in old for i in r.items} == {
        "history",
        "summary",
        "injection",
        "turn",
    }
    for record, digest in zip(old, received, strict=True):
        assert _dump_hash(agent.reconstruct(old_key, record.request_id, record.step)) == digest, record.id
    # new turns go on the same file: the first whole, the next against it
    for text in ["lookup three", "after"]:
        assert (await agent.run(old_key, text)).success
    path = tmp_path / ".ship" / "chats" / "web%3Auser%3Aold" / "requests.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    kinds = [line["v"] for line in lines[len(expected) :]]
    assert kinds[0] == 2 and 4 in kinds  # (a compaction in between starts a whole line too)
    records = agent.ledger(old_key)
    assert [r.to_json() for r in records[: len(expected)]] == expected
    for record, messages in zip(records[len(expected) :], model.received, strict=True):
        assert agent.reconstruct(old_key, record.request_id, record.step) == messages


async def test_a_missing_base_is_an_error_naming_the_chat_and_both_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = Model()
    agent = _agent(tmp_path, model)
    for text in ["hello", "plain", "more", "bye"]:
        assert (await agent.run(KEY, text)).success
    lines = _lines(tmp_path)
    assert [line["v"] for line in lines] == [2, 2, 4, 4]  # (the first history items are fresh)
    path = tmp_path / ".ship" / "chats" / "web%3Auser%3Adelta" / "requests.jsonl"
    lines = [lines[1], lines[2], lines[3]]
    path.write_text("".join(json.dumps(x) + "\n" for x in [lines[0], lines[2]]), encoding="utf-8")
    gone, broken = f"{lines[1]['requestId']}:1", f"{lines[2]['requestId']}:1"
    message = f"ledger record {broken} of chat {KEY!r} refers to ledger record {gone}, which is missing or unreadable"
    assert [r.id for r in agent.ledger(KEY)] == [f"{lines[0]['requestId']}:1"]
    assert message in caplog.text
    with pytest.raises(KeyError) as raised:
        agent.reconstruct(KEY, lines[2]["requestId"], 1)
    assert raised.value.args[0] == message
    shown = runner.invoke(cli.app, ["inspect", KEY, "-C", str(tmp_path), "--request", broken])
    assert shown.exit_code == 2 and gone in shown.output and broken in shown.output
    # the file is shorter than this process left it: its next line is whole, and readable
    assert (await agent.run(KEY, "again")).success
    assert "base" not in _lines(tmp_path)[-1]
    assert [r.id for r in agent.ledger(KEY)] == [
        f"{lines[0]['requestId']}:1",
        f"{_lines(tmp_path)[-1]['requestId']}:1",
    ]


async def test_a_file_replaced_or_cut_short_under_the_process_starts_with_a_whole_line(
    tmp_path: Path,
) -> None:
    model = Model()
    agent = _agent(tmp_path, model)
    for text in ["hello", "plain"]:
        assert (await agent.run(KEY, text)).success
    path = tmp_path / ".ship" / "chats" / "web%3Auser%3Adelta" / "requests.jsonl"
    path.unlink()  # removed by hand
    assert (await agent.run(KEY, "third")).success
    assert [line["v"] for line in _lines(tmp_path)] == [2]
    assert (await agent.run(KEY, "fourth")).success
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a crash tore the last line; the first is gone too
    assert (await agent.run(KEY, "fifth")).success
    assert _lines_after_torn(path)[-1]["v"] == 2
    assert [r.request_id for r in agent.ledger(KEY)][-1] == _lines_after_torn(path)[-1]["requestId"]


def _lines_after_torn(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


async def test_each_generation_of_a_rotated_ledger_starts_with_a_whole_line(tmp_path: Path) -> None:
    model = Model()
    agent = _agent(tmp_path, model, {"context": {"ledger": {"keepRequests": 10}}})
    for n in range(13):
        assert (await agent.run(KEY, f"lookup {n}" if n % 3 == 0 else f"turn {n}")).success
    previous, current = _lines(tmp_path, "requests.1.jsonl"), _lines(tmp_path)
    assert "base" not in previous[0] and "base" not in current[0]
    for lines in (previous, current):
        ids = {f"{line['requestId']}:{line['step']}" for line in lines}
        assert all(line["base"] in ids for line in lines if "base" in line)
    assert len(agent.ledger(KEY)) == len(previous) + len(current)
