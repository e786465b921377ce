"""An answer cut short by a crash goes on in the messages it was posted as.

The dedupe record keeps the ids of a streamed answer's messages (readable after a torn write, kept
through the window's rewrite, forgotten once answered); the writer handed them writes into them,
deletes those it does not need, and posts anew where the platform refuses an edit. The real
processes killed mid-answer are in each platform's ``*_process`` test; these are the cases a
kill cannot reach cheaply (a refused edit, a refused delete, a platform without edits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shipagent.hosts.channels import Dedupe
from shipagent.hosts.channels._types import (
    Capabilities,
    InboundMessage,
    PermanentSendError,
    SentMessage,
)
from shipagent.hosts.channels._writer import ReplyWriter

pytestmark = pytest.mark.anyio

CHAT = InboundMessage("test", "test:chat:1", "1", "100", "7", "Ada", "please")


@dataclass
class Chat:
    """A platform's chat as the bot sees it: what is shown now, and every call made."""

    capabilities: Capabilities = field(default_factory=lambda: Capabilities(edit=True))
    shown: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    refuse_edit: set[str] = field(default_factory=set)
    refuse_delete: set[str] = field(default_factory=set)
    next_id: int = 1

    async def send(
        self, chat: InboundMessage, text: str, *, formatted: bool, buttons: Any = ()
    ) -> SentMessage:
        sent = f"new{self.next_id}"
        self.next_id += 1
        self.shown[sent] = text
        self.calls.append(("send", sent))
        return SentMessage(sent)

    async def edit(self, chat: InboundMessage, message: SentMessage, text: str, *, formatted: bool) -> None:
        self.calls.append(("edit", message.message_id))
        if message.message_id in self.refuse_edit or message.message_id not in self.shown:
            raise PermanentSendError("message can't be edited")
        self.shown[message.message_id] = text

    async def delete(self, chat: InboundMessage, message: SentMessage) -> None:
        self.calls.append(("delete", message.message_id))
        if message.message_id in self.refuse_delete:
            raise PermanentSendError("message can't be deleted")
        self.shown.pop(message.message_id, None)


def _writer(chat: Chat, resume: list[str], records: list[list[str]], *, stream: bool = True) -> ReplyWriter:
    async def record(sent: list[str]) -> None:
        records.append(sent)

    return ReplyWriter(
        chat,  # type: ignore[arg-type]  # the methods a reply uses
        CHAT,
        limit=40,
        stream=stream,
        interval=0,
        resume=resume,
        record=record,
    )


async def test_the_record_keeps_an_answers_messages_through_a_torn_write_and_the_windows_rewrite(
    tmp_path: Path,
) -> None:
    seen = Dedupe(tmp_path, "test", window=2)
    assert await seen.accept("1", "100", {"text": "please"})
    await seen.replied("1", "100", ["m1"])
    await seen.replied("1", "100", ["m1", "m2"])
    await seen.replied("1", "999", ["x"])  # not an open message: nothing to answer again, not kept
    with seen.path.open("a") as handle:
        handle.write('{"chat": "1", "message": "100", "reply": ["m1", "m2", "m')  # died mid-append
    again = Dedupe(tmp_path, "test", window=2)
    assert await again.replies([("1", "100"), ("1", "999")]) == ["m1", "m2"]
    for n in range(5):  # past twice the window: the file is rewritten, the open message kept whole
        assert await again.accept("1", str(n))
    assert len(again.path.read_text().splitlines()) <= 2 * 2 + 1
    third = Dedupe(tmp_path, "test", window=2)
    assert await third.replies([("1", "100")]) == ["m1", "m2"]
    assert await third.unfinished() == [{"text": "please"}]
    await third.done("1", "100")
    assert await third.replies([("1", "100")]) == []
    assert await Dedupe(tmp_path, "test", window=2).replies([("1", "100")]) == []


async def test_a_fresh_streamed_answer_records_each_message_as_it_is_posted() -> None:
    chat, records = Chat(), []
    writer = _writer(chat, [], records)
    await writer.delta("first part of the answer goes here, ")
    await writer.delta("and a second message after the rollover")
    assert records == [["new1"], ["new1", "new2"]]
    await writer.finish("short now")
    assert list(chat.shown.values()) == ["short now"] and records[-1] == ["new1", "new2"]


async def test_the_answer_is_written_into_the_messages_left_and_the_ones_not_needed_are_deleted() -> None:
    chat, records = Chat(shown={"m1": "done: ", "m2": "and more"}), []  # rolled over before the kill
    writer = _writer(chat, ["m1", "m2"], records)
    await writer.delta("done: please")
    await writer.finish("done: please, all of it")
    assert chat.shown == {"m1": "done: please, all of it"}
    assert ("send", "new1") not in chat.calls and ("delete", "m2") in chat.calls
    assert records == []  # no new message: the record already names m1


async def test_a_message_that_cannot_be_edited_is_deleted_and_the_text_posted_anew() -> None:
    chat, records = Chat(shown={"m1": "done: ", "m2": "and"}, refuse_edit={"m1"}), []
    writer = _writer(chat, ["m1", "m2"], records)
    await writer.delta("done: please")
    await writer.finish("done: please")
    assert chat.shown == {"new1": "done: please"}  # m2 went too: it would sit above the new text
    assert chat.calls[:4] == [("edit", "m1"), ("delete", "m1"), ("delete", "m2"), ("send", "new1")]
    assert records == [["new1"]]


async def test_without_edits_the_left_messages_are_deleted_and_one_that_will_not_go_stays_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "shipagent.hosts.channels")
    chat = Chat(Capabilities(edit=False), shown={"m1": "done: ", "m2": "and"}, refuse_delete={"m2"})
    records: list[list[str]] = []
    writer = _writer(chat, ["m1", "m2"], records, stream=False)
    await writer.delta("done: please")
    await writer.finish("done: please")
    assert chat.shown == {"m2": "and", "new1": "done: please"}
    assert [c for c in chat.calls if c[0] == "edit"] == [] and records == []  # not streamed: not recorded
    assert [r.message for r in caplog.records].count(
        "test: message m2, posted before a restart, could not be deleted and stays: message can't be deleted"
    ) == 1


async def test_a_message_of_its_own_never_sits_below_an_earlier_answers_leftovers() -> None:
    chat, records = Chat(shown={"m1": "done: "}), []
    writer = _writer(chat, ["m1"], records)
    await writer.send_separate("a chat_send message")
    await writer.delta("the answer")
    await writer.finish("the answer")
    assert list(chat.shown.values()) == ["a chat_send message", "the answer"]
    assert chat.calls[0] == ("delete", "m1")
