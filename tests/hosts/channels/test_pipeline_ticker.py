"""A send that fails while the answer is being shown does not cut the turn without a word: the
answer's last write tries again and delivers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from shipagent.events import Done, TextDelta
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


class FlakyChat:
    """A platform whose first edits are refused (say, the message is briefly locked)."""

    capabilities = Capabilities(edit=True)

    def __init__(self) -> None:
        self.shown: dict[str, str] = {}
        self.refuse_edits = 1

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


class SlowAgent:
    """Writes its answer in three quick pieces, then thinks a while before it is done: the pieces
    after the first are shown by the pipeline's ticker, not by the deltas."""

    turn_executor = None
    instruction_sources: list[Any] = []  # noqa: RUF012 - read, never changed

    class config:
        class context:
            class chat_history:
                notice = False

    def __init__(self) -> None:
        self.finished = anyio.Event()

    async def run_stream(self, chat_key: str, text: str, **kwargs: Any) -> Any:
        for piece in ("one ", "two ", "three"):
            yield TextDelta(piece)
            await anyio.sleep(0.05)
        await anyio.sleep(0.8)  # the ticker shows "one two three" meanwhile: that edit is refused
        self.finished.set()
        yield Done(AgentResult(success=True, output="one two three", request_id=kwargs["request_id"]))


async def test_a_refused_edit_while_streaming_leaves_the_answer_to_its_last_write(tmp_path: Path) -> None:
    chat, agent = FlakyChat(), SlowAgent()
    pipeline = Pipeline(
        agent,  # type: ignore[arg-type]
        chat,  # type: ignore[arg-type]
        channel="test",
        rules=AccessRules(dm_policy="open"),
        pairing=PairingStore(tmp_path),
        dedupe=Dedupe(tmp_path, "test"),
        health=ChannelHealth(),
        options=PipelineOptions(edit_interval=0.3),
    )
    async with pipeline:
        await pipeline.accept(CHAT)
        with anyio.fail_after(10):
            await agent.finished.wait()
            while pipeline.running(CHAT.chat_key):  # noqa: ASYNC110 - the pipeline has no event for it
                await anyio.sleep(0.02)
    assert list(chat.shown.values()) == ["one two three"]
    assert await Dedupe(tmp_path, "test").unfinished() == []  # answered
