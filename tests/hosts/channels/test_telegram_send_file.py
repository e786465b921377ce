"""chat_send_file on Telegram: the file goes over the wire to the local Bot API server, then the answer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from shipagent.chatkeys import ShipPaths
from shipagent.jsonl import read_all
from tests.hosts.channels._support import running, ship_json
from tests.support.core import make_project
from tests.support.stream import StreamScript
from tests.support.telegram_server import FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 8


def sender(
    args: dict[str, Any], answer: str = "Here it is."
) -> Callable[[list[ModelMessage], Any, int], ModelResponse]:
    """A model that calls chat_send_file with ``args``, then answers with ``answer`` and the tool's result."""

    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            ok = isinstance(returns[0].content, dict) and returns[0].content.get("success")
            return ModelResponse(parts=[TextPart(answer if ok else f"failed: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart("chat_send_file", args, tool_call_id="f1")])

    return reply


def project(tmp_path: Path, fake: FakeTelegram, files: dict[str, bytes], **telegram: Any) -> Path:
    root = make_project(tmp_path / "p", ship_json(fake, **telegram))
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def answered(fake: FakeTelegram, text: str, chat_id: int = 42) -> bool:
    return any(m.text == text for m in fake.shown(chat_id))


async def test_a_document_is_uploaded_with_its_bytes_then_the_answer_arrives(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"reports/q3.pdf": PDF})
        script = StreamScript(sender({"path": "reports/q3.pdf", "caption": "The **Q3** report"}))
        async with running(root, fake, script.model):
            fake.user_message("send me the report")
            await fake.wait_for(lambda: answered(fake, "Here it is."))
        told = script.requests[0][-1].instructions or ""  # type: ignore[union-attr]
        assert "`chat_send_file`" in told  # the model is told files can be sent here
        [call] = fake.called("sendDocument")
        assert call.params["document"] == ("q3.pdf", PDF)
        assert call.params["chat_id"] == 42
        assert call.params["caption"] == "The <b>Q3</b> report" and call.params["parse_mode"] == "HTML"
        assert fake.called("sendPhoto") == []
        shown = fake.shown()
        assert [m.text for m in shown] == ["The Q3 report", "Here it is."]  # the file, then the answer
    lines = [e for e in read_all(ShipPaths(root).transcript("telegram:chat:42")) if e.get("via") == "tool"]
    assert [e["text"] for e in lines] == ["📎 reports/q3.pdf (2.0 KB)\nThe **Q3** report"]


async def test_an_image_goes_as_a_photo_into_the_topic_it_was_asked_in(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"chart.png": PNG}, groups={"policy": "open", "requireMention": False})
        script = StreamScript(sender({"path": "chart.png"}, "The chart."))
        async with running(root, fake, script.model):
            fake.user_message("the chart please", chat_id=-100, chat_type="supergroup", thread_id=5)
            await fake.wait_for(lambda: answered(fake, "The chart.", -100))
        [call] = fake.called("sendPhoto")
        assert call.params["photo"] == ("chart.png", PNG)
        assert call.params["chat_id"] == -100 and call.params["message_thread_id"] == 5
        assert "caption" not in call.params  # no caption: none is sent
        assert fake.called("sendDocument") == []
        assert {m.thread_id for m in fake.shown(-100)} == {5}


async def test_a_gif_and_a_file_that_only_claims_to_be_a_png_go_as_documents(tmp_path: Path) -> None:
    gif = b"GIF89a" + bytes(64)
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"anim.gif": gif, "fake.png": b"not an image"})
        script = StreamScript(
            lambda m, i, n: sender({"path": "anim.gif" if n == 1 else "fake.png"}, f"sent {n}")(m, i, n)
        )
        async with running(root, fake, script.model):
            fake.user_message("the gif")
            await fake.wait_for(lambda: answered(fake, "sent 2"))
            fake.user_message("the png")
            await fake.wait_for(lambda: answered(fake, "sent 4"))
        assert [c.params["document"] for c in fake.called("sendDocument")] == [
            ("anim.gif", gif),
            ("fake.png", b"not an image"),
        ]
        assert fake.called("sendPhoto") == []


async def test_a_photo_telegram_refuses_goes_again_as_a_document(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"wide.png": PNG})
        fake.fail_next("sendPhoto", 400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        script = StreamScript(sender({"path": "wide.png", "caption": "wide"}))
        async with running(root, fake, script.model):
            fake.user_message("the panorama")
            await fake.wait_for(lambda: answered(fake, "Here it is."))
        assert len(fake.called("sendPhoto")) == 1
        [call] = fake.called("sendDocument")
        assert call.params["document"] == ("wide.png", PNG) and call.params["caption"] == "wide"


async def test_flood_control_on_an_upload_is_waited_out_and_the_file_sent_once(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"notes.txt": b"launch at noon\n"})
        fake.fail_next("sendDocument", 429, "Too Many Requests: retry after 1", retry_after=1)
        script = StreamScript(sender({"path": "notes.txt"}))
        async with running(root, fake, script.model):
            fake.user_message("the notes")
            await fake.wait_for(lambda: answered(fake, "Here it is."))
        calls = fake.called("sendDocument")
        assert len(calls) == 2 and calls[1].at - calls[0].at >= 0.95  # retry_after honoured
        assert calls[1].params["document"] == ("notes.txt", b"launch at noon\n")
        assert len([m for m in fake.shown() if m.text != "Here it is."]) == 1  # one file message


async def test_a_file_as_the_whole_answer_is_not_followed_by_a_no_answer_notice(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {"notes.txt": b"launch at noon\n"})
        script = StreamScript(sender({"path": "notes.txt", "caption": "the notes"}, " "))
        async with running(root, fake, script.model) as (_, channel):
            fake.user_message("the notes")
            await fake.wait_for(lambda: len(script.requests) == 2 and channel.health.backlog == 0)
        assert [m.text for m in fake.shown()] == ["the notes"]


async def test_a_refused_path_sends_nothing_and_the_model_says_why(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("not yours\n")
    async with telegram_server() as fake:
        root = project(tmp_path, fake, {})
        script = StreamScript(sender({"path": "../outside.txt"}))
        async with running(root, fake, script.model):
            fake.user_message("send ../outside.txt")
            await fake.wait_for(lambda: any(m.text.startswith("failed:") for m in fake.shown()))
        assert "is outside the project" in fake.shown()[-1].text
        assert fake.called("sendDocument") == [] and fake.called("sendPhoto") == []
