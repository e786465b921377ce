"""A project's ``.ship/`` written by an earlier release is read by this one with nothing lost.

``tests/fixtures/ship_e449c2c/`` holds such a directory (made by
``tests/fixtures/make_ship_e449c2c.py``, which says how) and what that release read back from it:
the chat's history, transcript, ledger records (its lines are version 2 and 3) and context files
(a spilled tool result, compacted history, the catalog). This code must read the same, and take
new turns on top: the ledger goes on in its current line format.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "ship_e449c2c"
KEY = "web:user:fixture"


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("a new answer")])


def _project(tmp_path: Path) -> ShipAgent:
    shutil.copytree(FIXTURE / "ship", tmp_path / ".ship")
    shutil.copy(FIXTURE / "ship.json", tmp_path / "ship.json")
    return ShipAgent.from_project(tmp_path, model=FunctionModel(_answer))


def _read(agent: ShipAgent) -> dict[str, Any]:
    """What ``make_ship_e449c2c.read_back`` read, read by this code."""
    files = agent.context_files
    return {
        "history": json.loads(ModelMessagesTypeAdapter.dump_json(agent.history(KEY))),
        "transcript": agent.transcript.last(KEY, 1000),
        "ledger": [r.to_json() for r in agent.ledger(KEY)],
        "contextFiles": [
            {"ref": r.to_json(), "content": files.read(KEY, r.id, 0, 1_000_000).content}
            for r in files.list(KEY, limit=1000)
        ],
    }


def _expected() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    return data


def test_the_fixture_holds_what_it_claims() -> None:
    expected = _expected()
    requests = FIXTURE / "ship" / "chats" / "web%3Auser%3Afixture" / "requests.jsonl"
    versions = [json.loads(line)["v"] for line in requests.read_text(encoding="utf-8").splitlines()]
    assert set(versions) == {2, 3}  # whole lines and lines written against a base
    assert len(expected["transcript"]) == 14 and len(expected["ledger"]) == len(versions)
    assert {f["ref"]["kind"] for f in expected["contextFiles"]} == {"artifact", "history", "catalog"}
    sections = {name for record in expected["ledger"] for name, _ in record["cols"]["section"]}
    assert {"summary", "injections", "toolResults", "history"} <= sections


def test_an_earlier_release_ship_directory_reads_back_with_nothing_lost(tmp_path: Path) -> None:
    agent = _project(tmp_path)
    read, expected = _read(agent), _expected()
    assert read["history"] == expected["history"]
    assert read["transcript"] == expected["transcript"]
    assert read["ledger"] == expected["ledger"]
    assert read["contextFiles"] == expected["contextFiles"]


@pytest.mark.anyio
async def test_new_turns_go_on_the_same_files_in_the_current_format(tmp_path: Path) -> None:
    agent = _project(tmp_path)
    expected = _expected()
    for text in ("one more", "and another"):
        assert (await agent.run(KEY, text)).success
    read = _read(agent)
    assert read["ledger"][: len(expected["ledger"])] == expected["ledger"]
    assert read["transcript"][: len(expected["transcript"])] == expected["transcript"]
    assert [e["text"] for e in read["transcript"][-4:]] == [
        "one more",
        "a new answer",
        "and another",
        "a new answer",
    ]
    lines = (
        (tmp_path / ".ship" / "chats" / "web%3Auser%3Afixture" / "requests.jsonl").read_text().splitlines()
    )
    assert [json.loads(line)["v"] for line in lines[len(expected["ledger"]) :]] == [2, 4]
    # the catalog is written anew each turn, a compaction may add a file; the others stay as they were
    kept = [f for f in expected["contextFiles"] if f["ref"]["kind"] != "catalog"]
    assert kept and all(f in read["contextFiles"] for f in kept)
