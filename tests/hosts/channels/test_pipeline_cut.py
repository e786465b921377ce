"""An answer the pipeline itself cuts is never lost without a word.

A send refused while the answer is being shown ends the showing, not the turn: the answer's last
write tries again. An answer still being written when the pipeline stops (past ``stop_grace``) is
left to the next start, with the message it was streamed into, instead of being marked answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent.events import Done, RunEvent, TextDelta
from shipagent.hosts.channels import Dedupe
from shipagent.hosts.channels._access import AccessRules
from shipagent.hosts.channels._pairing import PairingStore
from shipagent.hosts.channels._pipeline import Pipeline, PipelineOptions
from shipagent.hosts.channels._types import (
    Capabilities,
    ChannelHealth,
    InboundMessage,
    PermanentSendError,
    SentMessage,
)
from shipagent.results import AgentResult

pytestmark = pytest.mark.anyio

CHAT = InboundMessage("test", "test:chat:1", "1", "100", "7", "Ada", "please")


class Platform:
    """A chat on a platform with edits; the first ``refuse_edits`` edits are refused."""

    capabilities = Capabilities(edit=True)

    def __init__(self, refuse_edits: int = 0) -> None:
        self.shown: dict[str, str] = {}
        self.refuse_edits = refuse_edits

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: Any = ()
    ) -> SentMessage:
        message_id = str(len(self.shown) + 1)
        self.shown[message_id] = text
        return SentMessage(message_id)

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        if self.refuse_edits:
            self.refuse_edits -= 1
            raise PermanentSendError("Bad Request: message can't be edited")
        self.shown[message.message_id] = text

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        self.shown.pop(message.message_id, None)

    async def typing(self, chat: InboundMessage) -> None:
        return None


class Agent:
    """What the pipeline reads of an agent, answering with ``stream(request_id)``."""

    turn_executor = None
    instruction_sources: list[Any] = []  # noqa: RUF012 - read, never changed

    class config:
        class context:
            class chat_history:
                notice = False

    def __init__(self, stream: Callable[[str], AsyncIterator[RunEvent]]) -> None:
        self.stream = stream

    def run_stream(self, chat_key: str, text: str, **kwargs: Any) -> AsyncIterator[RunEvent]:
        return self.stream(kwargs["request_id"])


def pipeline(agent: Agent, platform: Platform, root: Path, **options: Any) -> Pipeline:
    return Pipeline(
        agent,  # type: ignore[arg-type]
        platform,  # type: ignore[arg-type]
        channel="test",
        rules=AccessRules(dm_policy="open"),
        pairing=PairingStore(root),
        dedupe=Dedupe(root, "test"),
        health=ChannelHealth(),
        options=PipelineOptions(**options),
    )


async def test_a_refused_edit_while_streaming_leaves_the_answer_to_its_last_write(tmp_path: Path) -> None:
    thought = anyio.Event()

    async def three_quick_pieces_then_a_pause(request_id: str) -> AsyncIterator[RunEvent]:
        for piece in ("one ", "two ", "three"):
            yield TextDelta(piece)
            await anyio.sleep(0.05)
        await anyio.sleep(0.8)  # the ticker shows "one two three" meanwhile: that edit is refused
        thought.set()
        yield Done(AgentResult(success=True, output="one two three", request_id=request_id))

    platform = Platform(refuse_edits=1)
    channel = pipeline(Agent(three_quick_pieces_then_a_pause), platform, tmp_path, edit_interval=0.3)
    async with channel:
        await channel.accept(CHAT)
        with anyio.fail_after(10):
            await thought.wait()
            while channel.running(CHAT.chat_key):  # noqa: ASYNC110 - the pipeline has no event for it
                await anyio.sleep(0.02)
    assert list(platform.shown.values()) == ["one two three"]
    assert await Dedupe(tmp_path, "test").unfinished() == []  # answered


async def test_an_answer_cut_by_a_graceful_stop_is_left_to_the_next_start(tmp_path: Path) -> None:
    """Past ``stop_grace`` the pipeline cancels the answer being written: its message stays accepted
    with the streamed message's id, so the next start answers it there."""

    async def half_an_answer_then_nothing(request_id: str) -> AsyncIterator[RunEvent]:
        yield TextDelta("half an answer")
        await anyio.sleep(3600)

    platform = Platform()
    channel = pipeline(
        Agent(half_an_answer_then_nothing), platform, tmp_path, stop_grace=0.3, edit_interval=0.05
    )
    async with channel:
        await channel.accept(CHAT)
        with anyio.fail_after(10):
            while not platform.shown:  # noqa: ASYNC110 - the fake platform has no event to wait on
                await anyio.sleep(0.02)
    assert list(platform.shown.values()) == ["half an answer"]
    again = Dedupe(tmp_path, "test")
    assert [m["message_id"] for m in await again.unfinished()] == ["100"]
    assert await again.replies([("1", "100")]) == list(platform.shown)
