"""Feishu files and names against the local Feishu server: files in (downloaded from their message
into the chat's context files), files out (uploaded, then sent), and people named through the
contact API (failing soft to the open_id)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from shipagent.config import parse_config
from shipagent.hosts.channels import InboundMessage, PermanentSendError
from shipagent.hosts.channels.feishu._rest import FeishuSender
from shipagent.tools.execution import OutgoingFile
from tests.hosts.channels.test_feishu import running, ship_json
from tests.support.core import last_user_text, make_project
from tests.support.feishu_server import APP_SECRET, DM_CHAT, GROUP_CHAT, USER, FakeFeishu, feishu_server
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.7\n" + bytes(range(256)) * 8


@pytest.fixture(autouse=True)
def _secret_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", APP_SECRET)


def _reader(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    """Reads the first context file it is told about, then says what it holds."""
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        content = returns[0].content
        text = content.get("content", "") if isinstance(content, dict) else str(content)
        return ModelResponse(parts=[TextPart(f"the file says: {text.strip()}")])
    said = last_user_text(messages)
    if 'context_read(id="' in said:
        ref = said.split('context_read(id="')[1].split('"')[0]
        return ModelResponse(parts=[ToolCallPart("context_read", {"id": ref}, tool_call_id="r1")])
    return ModelResponse(parts=[TextPart(f"echo: {said}")])


def _answered(fake: FakeFeishu, text: str, chat: str = DM_CHAT) -> bool:
    """The chat shows ``text`` (``echo`` answers: a message starting so), the whole of it."""
    if text == "echo":
        return any(m.text.startswith("echo") for m in fake.shown(chat))
    return any(m.text == text for m in fake.shown(chat))


async def test_a_file_message_is_downloaded_from_its_message_and_read_with_context_read(
    tmp_path: Path,
) -> None:
    script = StreamScript(_reader)
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.users[USER] = "Ada"
        event = fake.user_file(b"launch at noon\n", name="notes.txt")
        await fake.wait_for(lambda: _answered(fake, "the file says: launch at noon"))
        said = last_user_text(script.requests[0])
        assert said.startswith("[Ada attached file notes.txt (15 bytes): context file")
        refs = agent.context_files.list(f"feishu:chat:{DM_CHAT}")
        assert [r.name for r in refs if r.kind == "artifact"] == ["notes.txt"]
    message_id = event["event"]["message"]["message_id"]
    [call] = fake.called("GET", f"/im/v1/messages/{message_id}/resources/")
    assert call.path.endswith(json.loads(event["event"]["message"]["content"])["file_key"])


async def test_an_image_and_a_picture_pasted_into_text_reach_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, _):
        fake.user_file(PNG, kind="image")
        await fake.wait_for(lambda: len(script.requests) == 1 and _answered(fake, "echo"))
        fake.user_file(PNG, kind="post", caption="what is this chart?")
        await fake.wait_for(lambda: len(script.requests) == 2 and len(fake.shown()) == 2)
        first, second = (last_user_text(r) for r in script.requests)
        refs = [r for r in agent.context_files.list(f"feishu:chat:{DM_CHAT}") if r.kind == "artifact"]
    assert f"attached image ({len(PNG)} bytes): context file" in first
    assert second.startswith("what is this chart?\n[") and f"attached image ({len(PNG)} bytes)" in second
    assert len(refs) == 2 and all(r.size_bytes == len(PNG) for r in refs)
    assert len(fake.called("GET", "/im/v1/messages/")) == 2  # each asked as type=image (the server checks)


async def test_a_file_over_the_limit_or_not_served_is_a_note_and_the_turn_goes_on(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        feishu_server() as fake,
        running(tmp_path / "p", fake, script.model, maxAttachmentBytes=100) as (agent, _),
    ):
        fake.user_file(b"x" * 101, name="big.txt")
        await fake.wait_for(lambda: len(script.requests) == 1 and _answered(fake, "echo"))
        fake.user_file(b"gone", name="gone.txt")
        fake.resources.clear()  # Feishu no longer serves it (withdrawn, or the bot lacks access)
        await fake.wait_for(lambda: len(script.requests) == 2 and len(fake.shown()) == 2)
        big, gone = (last_user_text(r) for r in script.requests)
        refs = [r for r in agent.context_files.list(f"feishu:chat:{DM_CHAT}") if r.kind == "artifact"]
    assert big.startswith("[file big.txt could not be downloaded:") and "maxAttachmentBytes" in big
    assert gone.startswith("[file gone.txt could not be downloaded:")
    assert refs == []
    assert not list((tmp_path / "p" / ".ship" / "channels" / "incoming").glob("*"))


def _sender(args: dict[str, Any], answer: str = "Here it is.") -> Any:
    def reply(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
        returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            ok = isinstance(returns[0].content, dict) and returns[0].content.get("success")
            return ModelResponse(parts=[TextPart(answer if ok else f"failed: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart("chat_send_file", args, tool_call_id="f1")])

    return reply


def _project(tmp_path: Path, fake: FakeFeishu, files: dict[str, bytes]) -> Path:
    root = make_project(tmp_path / "p", ship_json(fake))
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


async def test_chat_send_file_uploads_a_pdf_then_sends_it_and_its_caption(tmp_path: Path) -> None:
    async with feishu_server() as fake:
        root = _project(tmp_path, fake, {"reports/q3.pdf": PDF})
        script = StreamScript(_sender({"path": "reports/q3.pdf", "caption": "The **Q3** report"}))
        async with running(root, fake, script.model):
            fake.user_message("send me the report")
            await fake.wait_for(lambda: _answered(fake, "Here it is."))
        told = script.requests[0][-1].instructions or ""  # type: ignore[union-attr]
        assert "`chat_send_file`" in told  # the model is told files can be sent here
        [upload] = fake.uploads.values()
        assert (upload.kind, upload.name, upload.data) == ("pdf", "q3.pdf", PDF)
        assert fake.called("POST", "/im/v1/images") == []
        shown = fake.shown()
        assert [m.msg_type for m in shown] == ["file", "post", "post"]
        assert json.loads(shown[0].content) == {"file_key": upload.key}
        assert shown[1].text == "The **Q3** report" and shown[2].text == "Here it is."


async def test_chat_send_file_shows_an_image_inline_with_its_caption(tmp_path: Path) -> None:
    async with feishu_server() as fake:
        root = _project(tmp_path, fake, {"chart.png": PNG, "plain.png": PNG})
        script = StreamScript(_sender({"path": "chart.png", "caption": "The chart"}, "Sent."))
        async with running(root, fake, script.model):
            fake.user_message("the chart please")
            await fake.wait_for(lambda: _answered(fake, "Sent."))
        [upload] = fake.uploads.values()
        assert (upload.kind, upload.name, upload.data) == ("image", "chart.png", PNG)
        [image, answer] = fake.shown()
        assert image.msg_type == "post" and answer.text == "Sent."
        lines = json.loads(image.content)["zh_cn"]["content"]
        assert lines == [[{"tag": "md", "text": "The chart"}], [{"tag": "img", "image_key": upload.key}]]


async def test_the_sender_sends_an_uncaptioned_image_and_refuses_what_feishu_cannot_take(
    tmp_path: Path,
) -> None:
    async with feishu_server() as fake:
        config = parse_config(ship_json(fake), env={"FEISHU_APP_SECRET": APP_SECRET}).channels.feishu
        chat = InboundMessage("feishu", f"feishu:chat:{DM_CHAT}", DM_CHAT, "om_x", USER, USER, "")
        async with FeishuSender(config) as out:
            sent = await out.send_file(chat, OutgoingFile("plot.PNG", PNG), formatted=True)
            with pytest.raises(PermanentSendError, match="empty"):
                await out.send_file(chat, OutgoingFile("empty.txt", b""), formatted=True)
            with pytest.raises(PermanentSendError, match=r"31,457,280"):
                await out.send_file(
                    chat, OutgoingFile("huge.bin", b"\0" * (30 * 1024 * 1024 + 1)), formatted=True
                )
        [shown] = fake.shown()
        assert shown.id == sent.message_id and shown.msg_type == "image"
        assert fake.uploads[json.loads(shown.content)["image_key"]].data == PNG
        assert fake.called("POST", "/im/v1/files") == []  # refused before any upload


async def test_people_are_named_once_per_person_and_by_open_id_without_the_contact_scope(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="shipagent.hosts.channels.feishu")
    script = StreamScript()
    async with feishu_server() as fake, running(tmp_path / "p", fake, script.model) as (_, channel):
        fake.users[USER] = "Ada Lovelace"
        for n in range(2):
            fake.user_message(f"named {n}", chat_id=GROUP_CHAT, group=True, mention=True)
            await fake.wait_for(
                lambda n=n: len(script.requests) == n + 1 and len(fake.shown(GROUP_CHAT)) == n + 1
            )
        assert len(fake.called("GET", f"/contact/v3/users/{USER}")) == 1  # kept, not asked per message
        fake.contact_scope = False
        stranger = "ou_stranger00000000000001"
        for n in range(2):
            fake.user_message(f"unnamed {n}", chat_id=GROUP_CHAT, group=True, mention=True, user=stranger)
            await fake.wait_for(
                lambda n=n: len(script.requests) == n + 3 and len(fake.shown(GROUP_CHAT)) == n + 3
            )
        seen = [last_user_text(r) for r in script.requests]
        assert channel.names.lookups == 2
    assert "Ada Lovelace" in seen[0] and "Ada Lovelace" in seen[1]
    assert stranger in seen[2] and stranger in seen[3]  # the open_id stands in, the turn goes on
    refused = [r for r in caplog.records if "contact:user.base:readonly" in r.getMessage()]
    assert len(refused) == 1 and APP_SECRET not in caplog.text


async def test_names_are_kept_within_a_bound_and_a_slow_lookup_falls_back_to_the_open_id() -> None:
    from shipagent.hosts.channels.feishu._names import Names
    from shipagent.hosts.channels.feishu._rest import FeishuRest

    async with feishu_server() as fake:
        config = parse_config(ship_json(fake), env={"FEISHU_APP_SECRET": APP_SECRET}).channels.feishu
        rest = FeishuRest(config)
        people = {f"ou_p{n:020d}": f"Person {n}" for n in range(3)}
        fake.users.update(people)
        names = Names(rest._client, rest._clean, keep=2)
        ids = list(people)
        assert [await names.of(i) for i in ids] == list(people.values())
        assert await names.of(ids[2]) == "Person 2" and names.lookups == 3  # kept
        assert await names.of(ids[0]) == "Person 0" and names.lookups == 4  # pushed out by the bound
        assert await names.of("not-an-open-id") == "not-an-open-id" and names.lookups == 4

        fresh = Names(rest._client, rest._clean, ttl=0.0)
        await fresh.of(ids[0])
        await fresh.of(ids[0])
        assert fresh.lookups == 2  # past its time, a name is asked again

        fake.contact_delay = 2.0
        slow = Names(rest._client, rest._clean, wait=0.2)
        assert await slow.of(ids[1]) == ids[1]  # given up: the open_id stands in
