"""The token budget bounds what each model request carries; what is stored stays lossless."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from shipagent import current_tool_context
from shipagent.window.budget import fit_to_budget
from shipagent.window.compaction import is_summary, summary_message
from shipagent.window.tokens import count_tokens
from tests.support.core import (
    ScriptedModel,
    answer,
    has_tool_return,
    make_agent,
    make_project,
    render,
    tool_call,
    user_texts,
)

TWO_MB = 2 * 1024 * 1024
MARKER = "shipagent cut"


def _big_text(size: int) -> str:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
    lines, total, i = [], 0, 0
    while total < size:
        line = f"{i:07d} " + " ".join(words[(i + j) % len(words)] for j in range(12))
        lines.append(line)
        total += len(line) + 1
        i += 1
    head, tail = "BEGIN-OF-OUTPUT\n", "\nEND-OF-OUTPUT"
    return head + "\n".join(lines)[: size - len(head) - len(tail)] + tail


BIG = _big_text(TWO_MB)


def _part_text(part: object) -> str:
    if isinstance(part, UserPromptPart):
        return part.content if isinstance(part.content, str) else ""
    if isinstance(part, SystemPromptPart | TextPart):
        return part.content
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, ToolCallPart):
        return part.args_as_json_str()
    return ""


def sent_tokens(messages: list[ModelMessage]) -> int:
    """What a request's messages cost in o200k_base tokens (counted exactly, no upper bound)."""
    from shipagent.window.tokens import encoding

    return sum(
        len(encoding().encode(_part_text(p), disallowed_special=())) for m in messages for p in m.parts
    )


def dump_big() -> str:
    return BIG


def _files_holding(root: Path, text: str) -> list[str]:
    """The files under ``.ship`` holding ``text`` byte for byte (raw, or as a JSON string)."""
    raw, escaped = text.encode(), json.dumps(text, ensure_ascii=False)[1:-1].encode()
    return sorted(
        str(p.relative_to(root))
        for p in (root / ".ship").rglob("*")
        if p.is_file() and (raw in (data := p.read_bytes()) or escaped in data)
    )


@pytest.mark.anyio
async def test_a_2mb_tool_output_is_bounded_in_the_request_and_kept_whole_on_disk(tmp_path: Path) -> None:
    root = make_project(tmp_path)  # default maxHistoryTokens: 32000

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("that was big") if has_tool_return(messages) else tool_call("dump_big")

    scripted = ScriptedModel(reply)
    agent = make_agent(root, scripted.model, [dump_big])
    result = await agent.run("k", "show me the log")
    assert result.success, result.output
    assert len(BIG) == TWO_MB

    after_tool = scripted.requests[1]
    [returned] = [p for m in after_tool for p in m.parts if isinstance(p, ToolReturnPart)]
    content = returned.model_response_str()
    # The model sees a bounded, visibly shortened version — either cut by the token budget or
    # replaced by a preview of the context file it was spilled to — starting with the real head.
    assert MARKER in content or "context file" in content
    assert "BEGIN-OF-OUTPUT" in content
    assert len(content) < 100_000
    assert sent_tokens(after_tool) < 32000
    assert user_texts(after_tool) == ["show me the log"]

    # Lossless: all 2 MB are on disk, byte for byte.
    assert _files_holding(root, BIG)

    # The next turn is still bounded: the tool result is part of the history it sends.
    assert (await agent.run("k", "and now?")).success
    assert sent_tokens(scripted.requests[-1]) < 32000
    assert user_texts(scripted.requests[-1]) == ["show me the log", "and now?"]


def test_budget_cuts_a_2mb_tool_return_with_a_marker() -> None:
    # Whatever produced it (an MCP result, a tool that is not spilled), a huge tool return that
    # reaches the request is cut by the budget, head and tail kept.
    call = ModelResponse(parts=[ToolCallPart("dump_big", {}, tool_call_id="c1")])
    ret = ModelRequest(parts=[ToolReturnPart("dump_big", BIG, tool_call_id="c1")])
    current = [ModelRequest(parts=[UserPromptPart("show me")]), call, ret]
    prior, out = fit_to_budget([], current, 32000)
    assert prior == [] and len(out) == 3
    cut = out[2].parts[0]
    assert isinstance(cut, ToolReturnPart)
    assert MARKER in cut.content and cut.content.startswith("BEGIN-OF-OUTPUT")
    assert cut.content.endswith("END-OF-OUTPUT")
    assert sent_tokens(out) < 32000
    assert ret.parts[0].content == BIG  # the input is never edited in place


@pytest.mark.anyio
async def test_a_huge_user_message_is_cut_too(tmp_path: Path) -> None:
    scripted = ScriptedModel(lambda messages, info, n: answer("ok"))
    agent = make_agent(make_project(tmp_path), scripted.model)
    assert (await agent.run("k", BIG)).success
    sent = scripted.requests[0]
    assert sent_tokens(sent) < 32000 and MARKER in user_texts(sent)[0]
    assert user_texts(agent.history("k")) == [BIG]  # stored whole
    assert "chats/k/messages.jsonl" in " ".join(_files_holding(tmp_path, BIG))
    assert user_texts(make_agent(tmp_path, scripted.model).history("k")) == [BIG]


def _sentence(i: int) -> str:
    return f"message {i}: " + " ".join(f"token{i}x{j}" for j in range(20))


@pytest.mark.anyio
async def test_a_long_chat_never_sends_more_than_the_budget(tmp_path: Path) -> None:
    budget = 1200
    root = make_project(
        tmp_path,
        # no compaction (by count or tokens): the budget alone keeps every request small
        {
            "context": {
                "chatHistory": {
                    "maxHistoryTokens": budget,
                    "inMemoryMaxMessages": 1000,
                    "compactAtTokens": 10**6,
                }
            }
        },
    )
    scripted = ScriptedModel(lambda messages, info, n: answer("reply " + _sentence(n)))
    agent = make_agent(root, scripted.model)
    for i in range(30):
        assert (await agent.run("k", _sentence(i))).success

    history = agent.history("k")
    assert len(history) == 60
    assert sent_tokens(history) > 3 * budget  # the stored chat is far over the budget
    for request in scripted.requests:
        assert sent_tokens(request) <= budget
    last = scripted.requests[-1]
    # The newest turns are sent whole and in order, the user's current text unchanged, and the model
    # is told, first and as user text after the instructions, that older messages were left out
    # (they are on disk).
    said = user_texts(last)
    assert said[-1] == _sentence(29)
    assert said == [_sentence(i) for i in range(30 - len(said), 30)]
    assert len(said) >= 3
    kind, note = render(last)[0][1:]
    assert kind == "user-prompt" and "left out" in note and "chat_load_history" in note


@pytest.mark.anyio
async def test_budget_keeps_the_compaction_summary_first(tmp_path: Path) -> None:
    budget = 1500
    root = make_project(
        tmp_path,
        {
            "context": {
                "chatHistory": {
                    "maxHistoryTokens": budget,
                    "inMemoryMaxMessages": 20,
                    "compactKeepLastMessages": 16,
                }
            }
        },
    )
    scripted = ScriptedModel(lambda messages, info, n: answer("reply " + _sentence(n)))
    agent = make_agent(root, scripted.model)
    for i in range(14):
        assert (await agent.run("k", _sentence(i))).success
    assert is_summary(agent.history("k")[0])
    for request in scripted.requests:
        assert sent_tokens(request) <= budget
    first = render(scripted.requests[-1])[0]
    # the summary opens the conversation, sent as user text after the instructions
    assert first[1] == "user-prompt" and first[2].startswith("[Summary of the earlier conversation")


def test_fit_to_budget_never_starts_on_an_orphaned_tool_return() -> None:
    filler = " ".join(f"w{j}" for j in range(200))
    prior: list[ModelMessage] = [summary_message(4, "earlier things")]
    for i in range(6):
        prior += [
            ModelRequest(parts=[UserPromptPart(f"u{i} {filler}")]),
            ModelResponse(parts=[ToolCallPart("t", {}, tool_call_id=f"c{i}")]),
            ModelRequest(parts=[ToolReturnPart("t", f"r{i} {filler}", tool_call_id=f"c{i}")]),
            ModelResponse(parts=[TextPart(f"a{i}")]),
        ]
    current = [ModelRequest(parts=[UserPromptPart("now")])]
    for budget in range(300, 3000, 97):
        out_prior, out_current = fit_to_budget(prior, current, budget)
        assert out_current == current
        assert is_summary(out_prior[0])
        body = [m for m in out_prior if not is_summary(m) and not _is_note(m)]
        calls = {p.tool_call_id for m in body for p in m.parts if isinstance(p, ToolCallPart)}
        returns = {p.tool_call_id for m in body for p in m.parts if isinstance(p, ToolReturnPart)}
        assert returns <= calls, budget
        assert sum(count_tokens(_part_text(p)) for m in out_prior + out_current for p in m.parts) <= budget


def _is_note(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and "left out" in str(message.parts[0])


def test_fit_to_budget_under_budget_is_the_identity() -> None:
    prior = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")])]
    current = [ModelRequest(parts=[UserPromptPart("again")])]
    assert fit_to_budget(prior, current, 1000) == (prior, current)


def inject_huge() -> str:
    ctx = current_tool_context()
    ctx.inject_system_message_once("RULES-HEAD " + "rule " * 100_000, fingerprint="huge-system")
    ctx.inject_assistant_message_once("SAID-HEAD " + "said " * 100_000, fingerprint="huge-assistant")
    return "injected"


@pytest.mark.anyio
async def test_injected_messages_count_against_the_budget(tmp_path: Path) -> None:
    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        return answer("done") if has_tool_return(messages) else tool_call("inject_huge")

    scripted = ScriptedModel(reply)
    agent = make_agent(make_project(tmp_path), scripted.model, [inject_huge])
    assert (await agent.run("k", "load everything")).success
    sent = scripted.requests[1]
    assert sent_tokens(sent) < 32000
    rendered = render(sent)
    # Still there, in place, cut with the marker; the user's text untouched.
    assert rendered[0][2].startswith("RULES-HEAD") and MARKER in rendered[0][2]
    assert rendered[1][2].startswith("SAID-HEAD") and MARKER in rendered[1][2]
    assert rendered[2] == ("request", "user-prompt", "load everything")


def test_over_budget_run_elides_its_oldest_tool_result_first() -> None:
    """When a run's own results overflow, the oldest are elided to a stub; the newest page stays whole."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

    from shipagent.window.budget import fit_to_budget, message_tokens

    page = "line of a paged log file with words\n" * 180  # ~1,800 tokens: under the per-part cap
    current = [ModelRequest(parts=[UserPromptPart("read the log")])]
    for i in range(6):  # ~10,800 tokens in all, over the 8,000 budget
        current.append(
            ModelResponse(parts=[ToolCallPart("context_read", {"offset": i}, tool_call_id=f"c{i}")])
        )
        current.append(ModelRequest(parts=[ToolReturnPart("context_read", page, tool_call_id=f"c{i}")]))
    prior, fitted = fit_to_budget([], current, 8000)
    assert prior == []
    assert sum(message_tokens(m) for m in fitted) <= 8000
    returns = [p.content for m in fitted for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns[-1] == page  # the newest page arrives whole
    # the oldest paid for it: elided (not cut into invalid text), saying how to read it again
    assert returns[0] == (
        "[shipagent elided this earlier result of `context_read` (call c0) from this request so the "
        "newest results arrive whole; to see it again: call `context_read` again]"
    )
    assert not any("shipagent cut" in r for r in returns)
