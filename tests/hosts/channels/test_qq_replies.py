"""QQ's cap of five passive replies to one message: the fake enforces it, the channel never passes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from shipagent.hosts.channels.qq._replies import CUT_NOTE
from tests.hosts.channels.test_qq import _secret, running  # noqa: F401 - the fixture is used by name
from tests.support.qq_server import APP_ID, GROUP, SECRET, USER, qq_server
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{i:04d}" for i in range(1500))  # 13,499 characters: 7 replies of 2,000


def _says(text: str) -> Any:
    return lambda _m, _i, _n: ModelResponse(parts=[TextPart(text)])


async def test_the_fake_refuses_a_sixth_reply_to_one_message_with_qqs_error() -> None:
    async with qq_server() as fake, httpx.AsyncClient(base_url=fake.url) as client:
        token = await client.post("/app/getAppAccessToken", json={"appId": APP_ID, "clientSecret": SECRET})
        headers = {"Authorization": f"QQBot {token.json()['access_token']}", "X-Union-Appid": APP_ID}
        asked = fake.group_message("hi")
        codes = []
        for seq in range(1, 7):
            body = {"content": f"part {seq}", "msg_type": 0, "msg_id": asked["id"], "msg_seq": seq}
            answer = await client.post(f"/v2/groups/{GROUP}/messages", json=body, headers=headers)
            codes.append((answer.status_code, answer.json().get("code")))
    assert codes[:5] == [(200, None)] * 5 and codes[5] == (429, 22009)
    assert len(fake.to("groups", GROUP)) == 5 and fake.refused_over_limit == 1


async def test_a_long_answer_is_cut_to_five_replies_and_the_last_says_so(tmp_path: Path) -> None:
    script = StreamScript(_says(LONG), chunk=500)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as (agent, channel):
        asked = fake.c2c_message("tell me everything")
        await fake.wait_for(lambda: any(r.content.endswith(CUT_NOTE) for r in fake.to("users", USER)))
        transcript = agent.paths.transcript(f"qq:c2c:{USER}").read_text(encoding="utf-8")
        assert channel.health.undelivered == 0
        fake.c2c_message("the rest please")  # the model has the whole answer to go on from
        await fake.wait_for(lambda: len(script.requests) == 2)
        told = script.requests[-1][-1].instructions or ""  # type: ignore[union-attr]
    replies = [r for r in fake.to("users", USER) if r.msg_id == asked["id"]]
    assert [r.msg_seq for r in replies] == [1, 2, 3, 4, 5] and replies[-1].content.endswith(CUT_NOTE)
    assert not any(CUT_NOTE in r.content for r in replies[:-1])
    assert all(len(r.content) <= 2000 for r in replies) and fake.refused_over_limit == 0
    shown = " ".join(r.content.removesuffix(CUT_NOTE) for r in replies).split()
    assert shown == LONG.split()[: len(shown)] and len(shown) > 4 * 180  # in order, nothing skipped
    assert LONG.split()[-1] in transcript  # the whole answer stays in the chat's transcript
    history = [p for m in script.requests[-1] for p in getattr(m, "parts", []) if isinstance(p, TextPart)]
    assert any(p.content == LONG for p in history)  # and in what the model sees next turn
    assert "at most 5 replies to one user message" in told and "9,883 characters" in told


def _tells_then_answers_long(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    if any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", [])):
        return ModelResponse(parts=[TextPart(LONG)])
    return ModelResponse(parts=[ToolCallPart("chat_send", {"text": "one moment"}, tool_call_id="c1")])


async def test_chat_send_and_a_long_answer_stay_within_five_replies(tmp_path: Path) -> None:
    script = StreamScript(_tells_then_answers_long, chunk=500)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.group_message("go")
        await fake.wait_for(lambda: any(r.content.endswith(CUT_NOTE) for r in fake.to("groups", GROUP)))
    replies = fake.to("groups", GROUP)
    assert [r.msg_seq for r in replies] == [1, 2, 3, 4, 5] and fake.refused_over_limit == 0
    assert replies[0].content == "one moment" and replies[1].content.startswith("word0000 word0001")


def _keeps_telling(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    if n <= 5:
        return ModelResponse(parts=[ToolCallPart("chat_send", {"text": f"step {n}"}, tool_call_id=f"c{n}")])
    return ModelResponse(parts=[TextPart("all done")])


async def test_the_fifth_reply_is_kept_for_the_answer_and_the_model_is_told(tmp_path: Path) -> None:
    script = StreamScript(_keeps_telling)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.c2c_message("go")
        await fake.wait_for(lambda: any(r.content.startswith("all done") for r in fake.to("users", USER)))
    said = [r.content for r in fake.to("users", USER)]
    assert said[:4] == ["step 1", "step 2", "step 3", "step 4"] and said[4].startswith("all done")
    assert len(said) == 5
    returns = [
        p for m in script.requests[-1] for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
    ]
    refused = json.dumps(returns[-1].content)
    assert "kept for the answer" in refused and "say it in your answer" in refused
    assert fake.refused_over_limit == 0


async def test_a_reply_lost_midway_through_a_long_answer_is_not_sent_twice(tmp_path: Path) -> None:
    answer = " ".join(f"word{i:04d}" for i in range(500))  # 4,499 characters: 3 replies
    script = StreamScript(_says(answer), chunk=500)
    async with qq_server() as fake, running(tmp_path / "p", fake, script.model) as _:
        fake.lose_after, fake.lose_answers = 1, 1  # QQ takes the second piece, the bot sees a 502
        fake.c2c_message("go")
        await fake.wait_for(
            lambda: " ".join(r.content for r in fake.to("users", USER)).split() == answer.split()
        )
    assert [r.msg_seq for r in fake.to("users", USER)] == [1, 2, 3]
    assert [c.body["msg_seq"] for c in fake.called("POST", "/v2/users/")] == [1, 2, 2, 3]


class ScriptedQQ:
    """QQ's passive-reply rules for one message, as :class:`PassiveReplies` sees them through its
    ``api``: a number used twice is refused, a sixth reply is refused, and ``lose`` makes QQ take
    the next reply while its answer is lost on the way back."""

    def __init__(self) -> None:
        self.taken: dict[int, str] = {}  # msg_seq -> content
        self.lose = 0

    async def __call__(self, method: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        from shipagent.hosts.channels._types import TransientSendError
        from shipagent.hosts.channels.qq._replies import RepliesUsed, SeqUsed

        seq = int(payload["msg_seq"])
        if seq in self.taken:
            raise SeqUsed("msg_seq used")
        if len(self.taken) >= 5:
            raise RepliesUsed("msg limit exceed")
        self.taken[seq] = str(payload["content"])
        if self.lose:
            self.lose -= 1
            raise TransientSendError("502 on the way back")
        return {"id": f"m{seq}"}


def _inbound() -> Any:
    from shipagent.hosts.channels._types import InboundMessage

    return InboundMessage("qq", f"qq:c2c:{USER}", USER, "in-1", USER, "QQ user", "go")


async def test_a_reply_qq_took_before_its_answer_was_lost_is_not_sent_again_nor_costs_another() -> None:
    from shipagent.hosts.channels._types import TransientSendError
    from shipagent.hosts.channels.qq._replies import PassiveReplies

    qq, chat = ScriptedQQ(), _inbound()
    replies = PassiveReplies(qq, 2000)
    for n in (1, 2, 3):
        await replies.text(chat, f"said {n}", answer=False)
    qq.lose = 1
    with pytest.raises(TransientSendError):
        await replies.text(chat, "said 4", answer=False)  # QQ took it; the bot did not hear so
    assert replies.left(chat, answer=False) == 1  # the retry's number is still the fourth
    await replies.text(chat, "said 4", answer=False)  # the retry: "already used" means it arrived
    await replies.text(chat, "THE ANSWER", answer=True)
    assert qq.taken == {1: "said 1", 2: "said 2", 3: "said 3", 4: "said 4", 5: "THE ANSWER"}


async def test_a_text_given_up_after_a_lost_answer_does_not_swallow_the_next_one() -> None:
    from shipagent.hosts.channels._types import TransientSendError
    from shipagent.hosts.channels.qq._replies import PassiveReplies

    qq, chat = ScriptedQQ(), _inbound()
    replies = PassiveReplies(qq, 2000)
    qq.lose = 1
    with pytest.raises(TransientSendError):
        await replies.text(chat, "given up", answer=False)  # and never retried
    await replies.text(chat, "THE ANSWER", answer=True)  # number 1 is taken by another text: 2
    assert qq.taken == {1: "given up", 2: "THE ANSWER"}
