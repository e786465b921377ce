"""Every store damaged in every way a crash, a disk or a hand edit can: readable after, chat goes on.

Stores: the model-message log, the transcript, the agent-context log, the context-file index and
the card store (SQLite). Damage: a torn last line, a garbage line in the middle, bytes that are not
UTF-8, valid JSON of the wrong shape, an emptied file, and a file replaced by random bytes. After
each, a fresh agent (what a restarted process is) must load the chat, run the next turn
successfully, and leave every JSONL store readable, with the new turn in the message log, the
transcript and the agent-context log.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from shipagent import ShipAgent
from shipagent.jsonl import read_all
from shipagent.store.files import _store
from tests.reliability._workload import make_agent, next_turn, text_of

pytestmark = pytest.mark.anyio
KEY = "rel:chat:damaged"


def _insert_middle(extra: bytes) -> Callable[[bytes], bytes]:
    def damage(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        middle = len(lines) // 2
        return b"".join([*lines[:middle], extra, *lines[middle:]])

    return damage


_WRONG = b'42\n"text"\n[1,2]\n{"t":"turn"}\n{"t":"compaction","history":"oops"}\n{"toolCalls":5}\n{"id": 7}\n'

DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "torn last line": lambda data: data[: -max(len(data.splitlines()[-1]) // 2, 1) - 1],
    "garbage line": _insert_middle(b'{"t": "turn", "messages": [ {{{ not json\n'),
    "not utf-8": _insert_middle(b"\xff\xfe\xfa\xc3\x28 broken bytes\n"),
    "wrong shape": lambda data: _insert_middle(_WRONG)(data) + _WRONG,  # mid-file and newest lines
    "emptied": lambda data: b"",
    "random bytes": lambda data: random.Random(len(data)).randbytes(4096),
}

STORES: dict[str, Callable[[ShipAgent], Path]] = {
    "message log": lambda agent: agent.chats.log.path(KEY),
    "transcript": lambda agent: agent.transcript.path(KEY),
    "agent-context log": lambda agent: agent.agent_context.path(KEY),
    "context-file index": lambda agent: agent.context_files.folder(KEY) / _store.INDEX_NAME,
}


async def run_turns(agent: ShipAgent, count: int) -> None:
    await agent.chats.aget(KEY)
    start = next_turn(agent, KEY)
    for n in range(start, start + count):
        result = await agent.run(KEY, text_of(KEY, n))
        assert result.success, result.output


def fresh(project: Path) -> ShipAgent:
    _store._cache.clear()  # a restarted process has read no context-file index yet
    return make_agent(project)


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("store", list(STORES))
async def test_a_damaged_store_stays_readable_and_the_chat_continues(
    tmp_path: Path, store: str, damage: str
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "ship.json").write_text(
        '{"context": {"chatHistory": {"inMemoryMaxMessages": 6, "compactKeepLastMessages": 2},'
        ' "files": {"spillThresholdBytes": 1024}}}',
        encoding="utf-8",
    )
    agent = make_agent(project)
    await run_turns(agent, 4)
    path = STORES[store](agent)
    assert path.is_file() and path.stat().st_size > 0
    path.write_bytes(DAMAGE[damage](path.read_bytes()))

    again = fresh(project)
    again.history(KEY)  # hydration never raises
    await run_turns(again, 1)
    again.context_files.list(KEY)

    # every JSONL store reads, and the newest turn is in the three chat stores
    for reader in STORES.values():
        read_all(reader(again))
    newest = [r for r in read_all(again.chats.log.path(KEY)) if isinstance(r, dict) and r.get("t") == "turn"][
        -1
    ]
    rid = newest["requestId"]
    assert any(
        isinstance(e, dict) and e.get("requestId") == rid for e in read_all(again.transcript.path(KEY))
    )
    assert any(
        isinstance(e, dict) and e.get("requestId") == rid for e in read_all(again.agent_context.path(KEY))
    )

    # and a process after that agrees with this one about the history
    last = fresh(project)
    assert len(last.history(KEY)) == len(again.history(KEY))


@pytest.mark.parametrize("damage", ["random bytes", "emptied", "torn last line"])
async def test_a_damaged_card_store_never_fails_a_turn(tmp_path: Path, damage: str) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    agent = make_agent(project)
    await run_turns(agent, 3)
    await agent.handover.aclose()
    database = next((project / ".ship").glob("*.sqlite3"))
    data = database.read_bytes()
    database.write_bytes(DAMAGE[damage](data) if damage != "torn last line" else data[: len(data) // 2])

    again = fresh(project)
    await run_turns(again, 2)  # the turns are saved; only their cards could not be written
    await again.handover.aclose()
    said = [e["text"] for e in read_all(again.transcript.path(KEY)) if e.get("role") == "user"]
    assert said == [text_of(KEY, n) for n in range(5)]
