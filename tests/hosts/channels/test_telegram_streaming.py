"""The answer on Telegram: streamed by edits, rolled over, split, formatted, and said when it fails."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent.hosts.channels import split_markdown
from shipagent.hosts.channels.telegram import markdown_to_html
from tests.hosts.channels._support import running
from tests.support.stream import StreamScript
from tests.support.telegram_server import telegram_server, visible_text

pytestmark = pytest.mark.anyio


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


async def test_streaming_edits_one_message_at_most_once_a_second_and_ends_on_the_answer(
    tmp_path: Path,
) -> None:
    answer = "The **answer** is " + " ".join(f"word{i}" for i in range(30)) + "."
    script = StreamScript(_says(answer), chunk=8, delay=0.12)  # about 3 s of streaming
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model, edit_interval=1.0) as _:
        fake.user_message("go")
        rendered = visible_text(markdown_to_html(answer), "HTML")[0]
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == rendered)
    assert len(fake.messages) == 1  # one message for the whole answer: never a duplicate
    message = fake.messages[0]
    assert len(message.versions) >= 3  # it grew while the model wrote
    ops = [c.at for c in fake.calls if c.method in ("sendMessage", "editMessageText")]
    assert all(later - earlier >= 0.9 for earlier, later in pairwise(ops))
    assert len(fake.called("editMessageText")) == len(message.versions) - 1  # no edit was refused
    assert all(a != b for a, b in pairwise(message.versions))
    assert message.parse_mode == "HTML"


async def test_streaming_rolls_over_to_a_new_message_before_the_limit(tmp_path: Path) -> None:
    answer = " ".join(f"token{i:03d}" for i in range(80))  # 719 characters
    script = StreamScript(_says(answer), chunk=25, delay=0.01)
    async with (
        telegram_server() as fake,
        running(tmp_path / "p", fake, script.model, textChunkLimit=200) as _,
    ):
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text.endswith("token079"))
    shown = fake.shown()
    assert len(shown) == len(split_markdown(answer, 200)) >= 4
    assert all(len(m.text) <= 200 for m in shown)
    assert " ".join(m.text for m in shown).split() == answer.split()  # every word once, in order
    assert len(fake.called("sendMessage")) == len(shown) + len([m for m in fake.messages if m.deleted])


async def test_a_long_answer_with_code_blocks_is_split_into_valid_messages(tmp_path: Path) -> None:
    code = "\n".join(f"    total += {i}  # line {i}" for i in range(180))
    answer = "Intro **text**.\n\n" + "\n\n".join(
        f"Part {n}: " + "lorem ipsum " * 40 + f"\n\n```python\n{code}\n```" for n in range(2)
    )
    assert len(answer) > 10_000
    script = StreamScript(_says(answer))
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off") as _:
        fake.user_message("go")
        await fake.wait_for(lambda: " ".join(m.text for m in fake.shown()).count("# line 179") == 2)
    shown = fake.shown()
    assert len(shown) >= 3
    assert all(m.parse_mode == "HTML" for m in shown)  # every piece parsed as HTML: none was broken
    assert fake.called("editMessageText") == []  # streaming off: each piece sent once
    for call in fake.called("sendMessage"):
        body = call.params["text"]
        assert body.count("<pre>") == body.count("</pre>")
    text = "\n".join(m.text for m in shown)
    lines = re.findall(r"# line (\d+)", text)
    assert lines == [str(i) for i in range(180)] * 2  # every code line, once, in order


async def test_markup_the_server_rejects_goes_again_plain(tmp_path: Path) -> None:
    script = StreamScript(_says("Some **bold** words"))
    async with telegram_server() as fake, running(tmp_path / "p", fake, script.model, streaming="off") as _:
        fake.reject_html = True
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown())
        sent = fake.called("sendMessage")
    assert [c.params.get("parse_mode") for c in sent] == ["HTML", None]
    assert [m.text for m in fake.shown()] == ["Some **bold** words"]


class _Breaks(FunctionModel):
    """Streams a few words, then the provider fails."""

    def __init__(self) -> None:
        super().__init__(stream_function=self._stream, model_name="breaks")

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Half of an ans"
        yield "wer, then"
        raise RuntimeError("provider went away")


async def test_a_failed_turn_says_so_in_the_same_message(tmp_path: Path) -> None:
    async with telegram_server() as fake, running(tmp_path / "p", fake, _Breaks()) as _:
        fake.user_message("go")
        await fake.wait_for(lambda: fake.shown() and "⚠️" in fake.shown()[-1].text)
    assert len(fake.messages) == 1
    text = fake.messages[0].text
    assert text.startswith("Half of an answer, then") and "provider went away" in text
