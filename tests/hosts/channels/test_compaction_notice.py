"""The "older messages were summarised" notice on a channel: PTB against the local Bot API server.

Small watermarks (``inMemoryMaxMessages`` 4, keep 2) make the chat's history compact every few
turns; a turn that compacted is followed, after its answer, by one notice message
(``context.chatHistory.notice``), and by nothing when the notice is off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shipagent import ShipAgent
from shipagent.events import Compacted
from tests.hosts.channels._support import running, ship_json
from tests.support.core import make_project, read_jsonl
from tests.support.stream import StreamScript
from tests.support.telegram_server import FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio

TURNS = 6
CHAT = "telegram:chat:42"


def _compactions(agent: ShipAgent) -> int:
    """How many compactions the chat's message log records (each is one turn's)."""
    return sum(1 for r in read_jsonl(agent.paths.message_log(CHAT)) if r.get("t") == "compaction")


async def _chat(tmp_path: Path, fake: FakeTelegram, *, notice: bool, streaming: str) -> tuple[list[str], int]:
    """``TURNS`` messages, each answered before the next; what the chat shows, and the compactions."""
    ship: dict[str, Any] = ship_json(fake, streaming=streaming)
    history: dict[str, Any] = {"inMemoryMaxMessages": 4, "compactKeepLastMessages": 2}
    if not notice:
        history["notice"] = False
    ship["context"] = {"chatHistory": history}
    root = make_project(tmp_path / "p", ship)
    async with running(root, fake, StreamScript().model) as (agent, channel):
        for n in range(TURNS):
            fake.user_message(f"message {n}")
            await fake.wait_for(
                lambda n=n: (
                    channel.health.backlog == 0 and any(m.text == f"echo: message {n}" for m in fake.shown())
                )
            )
        compactions = _compactions(agent)
    return [m.text for m in fake.shown()], compactions


@pytest.mark.parametrize("streaming", ["edit", "off"])
async def test_a_turn_that_compacted_is_followed_by_one_notice_after_its_answer(
    tmp_path: Path, streaming: str
) -> None:
    async with telegram_server() as fake:
        shown, compactions = await _chat(tmp_path, fake, notice=True, streaming=streaming)
    assert compactions >= 1  # the marks made it happen
    answers = [f"echo: message {n}" for n in range(TURNS)]
    assert [t for t in shown if t != Compacted.NOTICE] == answers  # each answer once, in order
    assert shown.count(Compacted.NOTICE) == compactions  # one notice per compacting turn
    assert shown[0] != Compacted.NOTICE
    for at, text in enumerate(shown):  # every notice right after an answer, never two in a row
        if text == Compacted.NOTICE:
            assert shown[at - 1] in answers


async def test_no_notice_when_ship_json_turns_it_off(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        shown, compactions = await _chat(tmp_path, fake, notice=False, streaming="off")
    assert compactions >= 1
    assert shown == [f"echo: message {n}" for n in range(TURNS)]
