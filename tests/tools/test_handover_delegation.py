"""Delegation through ShipAgent: fork_join, delegate_async + delegation_result, ask_expert, limits.

Every test runs real turns (``ShipAgent.run``) with scripted FunctionModels: the orchestrator's model
calls the tools, each profile's model records exactly what it was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.chatkeys import encode_chat_key
from shipagent.store.cards._cards import CARD_PARENT_POINTER, CARD_TASK_INSTRUCTION
from shipagent.tools.handover import CARD_CHAT_MESSAGE, JsonContent, TextContent
from shipagent.tools.handover._tools import DELEGATION_TOOL_NAMES

pytestmark = pytest.mark.anyio

BOSS = "api:chat:boss"

Reply = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


@dataclass
class Recorder:
    """A model that records every request and answers with ``reply``."""

    reply: Reply
    requests: list[list[ModelMessage]] = field(default_factory=list)
    infos: list[AgentInfo] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        return self.reply(messages, info)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def text(answer: str) -> Reply:
    return lambda _m, _i: ModelResponse(parts=[TextPart(answer)])


def call_then(tool: str, args: dict[str, Any], final: Callable[[list[ModelMessage]], str]) -> Reply:
    """Call ``tool`` once; after its result arrives, answer with ``final(messages)``."""

    def reply(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        if tool_returns(messages):
            return ModelResponse(parts=[TextPart(final(messages))])
        return ModelResponse(parts=[ToolCallPart(tool, json.dumps(args), tool_call_id="c1")])

    return reply


def tool_returns(messages: list[ModelMessage]) -> list[Any]:
    """The contents of the tool results in the current run (after the last user prompt)."""
    out: list[Any] = []
    for message in messages:
        for part in getattr(message, "parts", []):
            if isinstance(part, UserPromptPart):
                out = []
            elif isinstance(part, ToolReturnPart):
                out.append(part.content)
    return out


def shape(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    """``(part kind, text)`` for every part, to compare what a model saw."""
    out: list[tuple[str, str]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, SystemPromptPart | UserPromptPart | TextPart):
                out.append((part.part_kind, str(part.content)))
            else:
                out.append((part.part_kind, repr(part)))
    return out


def all_text(messages: list[ModelMessage], info: AgentInfo | None = None) -> str:
    blob = json.dumps([shape([m]) for m in messages])
    return blob + (info.instructions or "" if info else "")


def project(tmp_path: Path, profiles: dict[str, Any], **handover: int) -> Path:
    ship: dict[str, Any] = {"name": "demo", "profiles": profiles}
    if handover:
        ship["handover"] = handover
    (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (tmp_path / "Agent.md").write_text("ORCHESTRATOR ROLE: plan and delegate.", encoding="utf-8")
    return tmp_path


PARENT_LINE = f"You are working on a task delegated to you by agent {BOSS}. Your final answer is returned to that agent."


# -- fork_join ------------------------------------------------------------------------------------


async def test_fork_join_gives_each_profile_exactly_its_context(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "researcher": {"instructions": "You research facts.", "model": "openai:not-used"},
            "writer": {"instructions": "You write copy.", "tools": ["skills_list"]},
        },
    )
    researcher = Recorder(text("Research: launch is feasible by Friday."))
    writer = Recorder(text("Copy: Ship it!"))
    notes_model = Recorder(text("Noted."))

    def orchestrate(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, UserPromptPart) and last.content == "secret plan: code name BLUEBIRD":
            return ModelResponse(parts=[TextPart("I will keep BLUEBIRD secret.")])
        returns = tool_returns(messages)
        if returns:
            results = returns[0]["results"]
            return ModelResponse(parts=[TextPart(" | ".join(r["output"] for r in results))])
        args = {
            "tasks": [
                {
                    "profile_name": "researcher",
                    "instruction": "Is a Friday launch feasible?",
                    "input_box_ids": [notes_box],
                },
                {"profile_name": "writer", "instruction": "Write a one-line launch slogan."},
            ],
            "max_parallel": 2,
        }
        return ModelResponse(parts=[ToolCallPart("fork_join", json.dumps(args), tool_call_id="fj")])

    boss = Recorder(orchestrate)
    # a second chat whose output box the researcher will inherit
    notes = ShipAgent.from_project(root, model=notes_model.model)
    await notes.run("api:chat:notes", "The deadline is Friday.")
    notes_box = await notes.handover.output_box_id("api:chat:notes")

    agent = ShipAgent.from_project(
        root, model=boss.model, profile_models={"researcher": researcher.model, "writer": writer.model}
    )
    async with agent:
        first = await agent.run(BOSS, "secret plan: code name BLUEBIRD")
        result = await agent.run(BOSS, "Plan the launch.")
    assert first.success and result.success
    assert result.output == "Research: launch is feasible by Friday. | Copy: Ship it!"
    assert [c.tool for c in result.tool_calls] == ["fork_join"]
    assert set(DELEGATION_TOOL_NAMES) <= {t.name for t in boss.infos[-1].function_tools}

    # the researcher saw: the parent pointer, the inherited turn, then its instruction. Nothing else.
    (seen,) = researcher.requests
    assert shape(seen) == [
        ("system-prompt", PARENT_LINE),
        ("user-prompt", "The deadline is Friday."),
        ("text", "Noted."),
        ("user-prompt", "Is a Friday launch feasible?"),
    ]
    # the writer inherited nothing: the parent pointer and its instruction
    (seen_w,) = writer.requests
    assert shape(seen_w) == [
        ("system-prompt", PARENT_LINE),
        ("user-prompt", "Write a one-line launch slogan."),
    ]
    for recorder in (researcher, writer):
        leaked = all_text(recorder.requests[0], recorder.infos[0])
        assert (
            "BLUEBIRD" not in leaked and "Plan the launch" not in leaked and "ORCHESTRATOR ROLE" not in leaked
        )
    # each ran as its profile: its own instructions, and the profile's tools limit
    assert "You research facts." in (researcher.infos[0].instructions or "")
    assert "You write copy." in (writer.infos[0].instructions or "")
    assert [t.name for t in writer.infos[0].function_tools] == ["skills_list"]

    # the boxes can be inspected afterwards
    fork = result.tool_calls[0]
    payload = json.loads(fork.output)
    r_task, w_task = payload["results"]
    assert (r_task["status"], w_task["status"]) == ("done", "done")
    assert r_task["chat_key"] == f"{BOSS}#delegate:{r_task['task_id']}"
    cards = await agent.handover.read_box(r_task["context_box_id"])
    assert [(c.type, c.content) for c in cards] == [
        (CARD_TASK_INSTRUCTION, TextContent("Is a Friday launch feasible?")),
        (CARD_CHAT_MESSAGE, TextContent("The deadline is Friday.")),
        (CARD_CHAT_MESSAGE, TextContent("Noted.")),
        (CARD_PARENT_POINTER, JsonContent({"parent_agent_id": BOSS})),
    ]
    answer = await agent.handover.read_box(r_task["output_box_id"])
    assert [(c.role, c.content) for c in answer] == [
        ("user", TextContent("Is a Friday launch feasible?")),
        ("assistant", TextContent("Research: launch is feasible by Friday.")),
    ]
    # the sub-agent's turn is a normal chat with its own transcript under .ship/chats/
    assert (root / ".ship" / "chats" / encode_chat_key(r_task["chat_key"]) / "history.jsonl").is_file()
    await notes.handover.aclose()


async def test_a_crash_inside_one_forked_task_does_not_fail_the_others(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "steady": {"instructions": "steady"},
            "crasher": {"instructions": "crash"},
            "badfile": {"agentMd": "../outside.md"},
        },
    )

    def crash(_m: list[ModelMessage], _i: AgentInfo) -> ModelResponse:
        raise RuntimeError("model exploded")

    tasks = [
        {"profile_name": "crasher", "instruction": "a"},
        {"profile_name": "steady", "instruction": "b"},
        {"profile_name": "ghost", "instruction": "c"},
        {"profile_name": "badfile", "instruction": "d"},
    ]
    boss = Recorder(call_then("fork_join", {"tasks": tasks}, lambda m: json.dumps(tool_returns(m)[0])))
    steady = Recorder(text("steady answer"))
    agent = ShipAgent.from_project(
        root, model=boss.model, profile_models={"crasher": FunctionModel(crash), "steady": steady.model}
    )
    result = await agent.run(BOSS, "go")
    assert result.success
    joined = json.loads(result.output)
    crashed, fine, ghost, bad = joined["results"]
    assert joined["success"] is True and joined["failed"] == 3
    assert not result.had_tool_failure  # the join worked; three of its tasks did not
    assert crashed["status"] == "failed" and "model exploded" in crashed["error"]
    assert fine["status"] == "done" and fine["output"] == "steady answer"
    assert ghost["status"] == "failed" and "'ghost' not found" in ghost["error"]
    assert bad["status"] == "failed" and "outside the project" in bad["error"]


# -- delegate_async + delegation_result --------------------------------------------------------------


async def test_delegate_async_then_delegation_result(tmp_path: Path) -> None:
    root = project(tmp_path, {"analyst": {"instructions": "You analyse."}})
    analyst = Recorder(text("Revenue grew 12%."))
    state: dict[str, Any] = {}

    def orchestrate(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if not returns:
            args = {"profile_name": "analyst", "instruction": "Summarise Q3 revenue."}
            return ModelResponse(parts=[ToolCallPart("delegate_async", json.dumps(args), tool_call_id="d")])
        if len(returns) == 1:
            state["started"] = returns[0]
            wait = {"task_id": returns[0]["task_id"], "wait_seconds": 10}
            return ModelResponse(
                parts=[ToolCallPart("delegation_result", json.dumps(wait), tool_call_id="r")]
            )
        state["result"] = returns[1]
        return ModelResponse(parts=[TextPart(f"Analyst says: {returns[1]['output']}")])

    boss = Recorder(orchestrate)
    agent = ShipAgent.from_project(root, model=boss.model, profile_models={"analyst": analyst.model})
    async with agent:
        result = await agent.run(BOSS, "How did Q3 go?")
    assert result.output == "Analyst says: Revenue grew 12%."
    started, done = state["started"], state["result"]
    assert started["success"] is True and started["status"] == "running"
    assert set(started) >= {"task_id", "context_box_id", "chat_key"}
    assert done["status"] == "done" and done["task_id"] == started["task_id"]
    assert [c.content for c in await agent.handover.read_box(done["output_box_id"])] == [
        TextContent("Summarise Q3 revenue."),
        TextContent("Revenue grew 12%."),
    ]
    assert shape(analyst.requests[0]) == [
        ("system-prompt", PARENT_LINE),
        ("user-prompt", "Summarise Q3 revenue."),
    ]
    # the orchestrator's own completed turn landed in its output box at commit
    assert [
        (c.role, c.content) for c in await agent.handover.read_box(await agent.handover.output_box_id(BOSS))
    ] == [
        ("user", TextContent("How did Q3 go?")),
        ("assistant", TextContent("Analyst says: Revenue grew 12%.")),
    ]


async def test_delegation_result_while_running_and_unknown_task(tmp_path: Path) -> None:
    root = project(tmp_path, {"slow": {"instructions": "slow"}})
    agent = ShipAgent.from_project(
        root, model=FunctionModel(text("x")), profile_models={"slow": FunctionModel(text("late"))}
    )
    handover = agent.handover
    task = await handover.prepare(BOSS, profile_name="slow", instruction="take your time")
    assert (await handover.wait(task.task_id, 0)).as_dict()["status"] == "running"
    handover.start(task)
    finished = await handover.wait(task.task_id, 10)
    assert (finished.status, finished.output) == ("done", "late")

    boss = Recorder(
        call_then("delegation_result", {"task_id": "nope"}, lambda m: json.dumps(tool_returns(m)[0]))
    )
    other = ShipAgent.from_project(root, model=boss.model)
    checked = await other.run(BOSS, "check")
    reply = json.loads(checked.tool_calls[0].output)
    assert reply == {
        "success": False,
        "error": "delegation task 'nope' not found (was it started by this agent?)",
    }
    await handover.aclose()


async def test_clone_inherits_the_clone_sources_output_box(tmp_path: Path) -> None:
    root = project(tmp_path, {"twin": {"instructions": "You continue."}})
    twin = Recorder(text("continued"))

    def orchestrate(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, UserPromptPart) and last.content == "remember: the colour is teal":
            return ModelResponse(parts=[TextPart("ok, teal")])
        returns = tool_returns(messages)
        if not returns:
            args = {"profile_name": "twin", "instruction": "Carry on.", "target_strategy": "clone"}
            return ModelResponse(parts=[ToolCallPart("delegate_async", json.dumps(args), tool_call_id="d")])
        if len(returns) == 1:
            wait = {"task_id": returns[0]["task_id"], "wait_seconds": 10}
            return ModelResponse(
                parts=[ToolCallPart("delegation_result", json.dumps(wait), tool_call_id="r")]
            )
        return ModelResponse(parts=[TextPart(returns[1]["output"])])

    agent = ShipAgent.from_project(
        root, model=FunctionModel(orchestrate), profile_models={"twin": twin.model}
    )
    await agent.run(BOSS, "remember: the colour is teal")
    assert (await agent.run(BOSS, "clone yourself")).output == "continued"
    assert shape(twin.requests[0]) == [
        ("system-prompt", PARENT_LINE),
        ("user-prompt", "remember: the colour is teal"),
        ("text", "ok, teal"),
        ("user-prompt", "Carry on."),
    ]


# -- ask_expert -------------------------------------------------------------------------------------


async def test_ask_expert_with_and_without_history(tmp_path: Path) -> None:
    root = project(tmp_path, {"expert": {"instructions": "You are the expert."}})
    expert = Recorder(text("Use a B-tree."))

    def orchestrate(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, UserPromptPart) and str(last.content).startswith("context:"):
            return ModelResponse(parts=[TextPart("understood")])
        returns = tool_returns(messages)
        if returns:
            return ModelResponse(parts=[TextPart(f"expert: {returns[0]['answer']}")])
        include = isinstance(last, UserPromptPart) and "with history" in str(last.content)
        args = {"profile_name": "expert", "question": "Which index?", "include_history": include}
        return ModelResponse(parts=[ToolCallPart("ask_expert", json.dumps(args), tool_call_id="a")])

    agent = ShipAgent.from_project(
        root, model=FunctionModel(orchestrate), profile_models={"expert": expert.model}
    )
    await agent.run(BOSS, "context: we store 1e9 sorted keys")
    assert (await agent.run(BOSS, "ask without history")).output == "expert: Use a B-tree."
    assert (await agent.run(BOSS, "ask with history")).output == "expert: Use a B-tree."
    without, with_history = expert.requests
    assert shape(without) == [("system-prompt", PARENT_LINE), ("user-prompt", "Which index?")]
    assert shape(with_history) == [
        ("system-prompt", PARENT_LINE),
        ("user-prompt", "context: we store 1e9 sorted keys"),
        ("text", "understood"),
        ("user-prompt", "ask without history"),
        ("text", "expert: Use a B-tree."),
        ("user-prompt", "Which index?"),
    ]


# -- limits -----------------------------------------------------------------------------------------


async def test_depth_limit_stops_a_chain_of_delegations(tmp_path: Path) -> None:
    root = project(tmp_path, {"a": {"instructions": "A"}, "b": {"instructions": "B"}}, maxDepth=2)
    seen: dict[str, Any] = {}

    def relay(asker: str, target: str) -> Reply:
        def reply(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
            returns = tool_returns(messages)
            if returns:
                seen[asker] = returns[0]
                said = returns[0].get("answer") or returns[0].get("error")
                return ModelResponse(parts=[TextPart(f"{asker} heard: {said}")])
            args = {"profile_name": target, "question": "go deeper"}
            return ModelResponse(parts=[ToolCallPart("ask_expert", json.dumps(args), tool_call_id="x")])

        return reply

    agent = ShipAgent.from_project(
        root,
        model=FunctionModel(relay("top", "a")),  # depth 0 asks a (depth 1), a asks b (depth 2), b asks a
        profile_models={"a": FunctionModel(relay("a", "b")), "b": FunctionModel(relay("b", "a"))},
    )
    result = await agent.run(BOSS, "start")
    assert result.success
    # b runs 2 deep and maxDepth is 2: its ask_expert is refused with an error it can read
    assert seen["b"]["success"] is False
    assert "delegation depth limit reached" in seen["b"]["error"]
    assert "maxDepth is 2" in seen["b"]["error"]
    assert seen["a"]["status"] == "done" and seen["top"]["status"] == "done"
    assert result.output.startswith("top heard: a heard: b heard: delegation depth limit reached")
    # the chain is visible in the chat keys: two delegations deep
    assert seen["a"]["chat_key"].count("#delegate:") == 2


async def test_per_run_subagent_limit(tmp_path: Path) -> None:
    root = project(tmp_path, {"w": {"instructions": "w"}}, maxSubagentsPerRun=2)
    tasks = [{"profile_name": "w", "instruction": str(i)} for i in range(3)]
    boss = Recorder(call_then("fork_join", {"tasks": tasks}, lambda m: json.dumps(tool_returns(m)[0])))
    agent = ShipAgent.from_project(root, model=boss.model, profile_models={"w": FunctionModel(text("ok"))})
    joined = json.loads((await agent.run(BOSS, "go")).output)
    assert [r["status"] for r in joined["results"]] == ["done", "done", "failed"]
    assert "maxSubagentsPerRun is 2" in joined["results"][2]["error"]
    # the limit is per run: the next turn may start sub-agents again
    boss.reply = call_then("fork_join", {"tasks": tasks[:1]}, lambda m: json.dumps(tool_returns(m)[0]))
    assert json.loads((await agent.run(BOSS, "again")).output)["results"][0]["status"] == "done"


# -- the Python surface -----------------------------------------------------------------------------


async def test_handover_is_usable_without_starting_the_agent(tmp_path: Path) -> None:
    root = project(tmp_path, {"writer": {"instructions": "w"}})
    agent = ShipAgent.from_project(root)  # no model configured at all
    store, packer = agent.handover.store, agent.handover.packer
    card = await store.add_card(type="note", content="hello", author_id="script")
    box = await store.create_box([card])
    box_id, _, attached = await packer.pack_context_with_instruction(
        project_id=None,
        tool_suffix="script",
        source_agent_id="me",
        profile_name="writer",
        instruction="x",
        input_box_ids=[box],
    )
    assert attached[1] == card
    assert (await store.get_box(box_id)).project_id == "demo"
    assert (root / ".ship" / "cardbox.sqlite3").is_file()
    rendered = await agent.handover.render_box(box_id)
    assert rendered.prompt == "x"
    await agent.handover.aclose()


async def test_no_profiles_means_no_delegation_tools(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text("{}", encoding="utf-8")
    boss = Recorder(text("hi"))
    agent = ShipAgent.from_project(tmp_path, model=boss.model)
    await agent.run(BOSS, "hello")
    assert not set(DELEGATION_TOOL_NAMES) & {t.name for t in boss.infos[0].function_tools}
    # completed turns still land in the chat's output box, ready to be handed over later
    cards = await agent.handover.read_box(await agent.handover.output_box_id(BOSS))
    assert [(c.type, c.role, c.content) for c in cards] == [
        (CARD_CHAT_MESSAGE, "user", TextContent("hello")),
        (CARD_CHAT_MESSAGE, "assistant", TextContent("hi")),
    ]
    assert isinstance(boss.requests[0][0], ModelRequest) and not isinstance(
        boss.requests[0][0], ModelResponse
    )


async def test_profile_agent_md_file_is_the_sub_agents_role(tmp_path: Path) -> None:
    root = project(tmp_path, {"editor": {"instructions": "Be brief.", "agentMd": "profiles/editor.md"}})
    (root / "profiles").mkdir()
    (root / "profiles" / "editor.md").write_text("EDITOR ROLE: fix grammar.", encoding="utf-8")
    editor = Recorder(text("Fixed."))
    boss = Recorder(
        call_then("ask_expert", {"profile_name": "editor", "question": "Fix: 'teh'"}, lambda m: "ok")
    )
    agent = ShipAgent.from_project(root, model=boss.model, profile_models={"editor": editor.model})
    await agent.run(BOSS, "edit")
    instructions = editor.infos[0].instructions or ""
    assert instructions.index("Be brief.") < instructions.index("EDITOR ROLE: fix grammar.")
    assert "ORCHESTRATOR ROLE" not in instructions
    assert "ORCHESTRATOR ROLE" in (boss.infos[0].instructions or "")


async def test_sub_agent_is_built_from_the_profile_and_shares_the_parents_mcp_servers(tmp_path: Path) -> None:
    root = project(tmp_path, {"r": {"instructions": "R", "model": "test", "tools": ["context_*"]}})
    parent = ShipAgent.from_project(root, model=FunctionModel(text("p")))
    profile = await parent.handover.resources.get_profile(
        await parent.handover.resources.find_profile_by_name("r")
    )
    sub = parent._sub_agent(profile, parent.handover)
    assert sub.mcp is parent.mcp
    assert sub.handover.store is parent.handover.store and sub.handover.depth == 1
    assert sub.config.llm.model == "test" and parent.config.llm.model is None
    assert sub.handover.allows("context_read") and not sub.handover.allows("exec_shell")
    assert parent.handover.allows("exec_shell")
    await parent.handover.aclose()


async def test_a_broken_card_store_does_not_fail_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ship.json").write_text("{}", encoding="utf-8")
    agent = ShipAgent.from_project(tmp_path, model=FunctionModel(text("still here")))

    async def broken(*_args: Any, **_kwargs: Any) -> list[str]:
        raise OSError("disk full")

    agent.handover.store.append_to_box = broken  # type: ignore[method-assign]
    result = await agent.run(BOSS, "hello")
    assert result.success and result.output == "still here"
    assert [m.kind for m in agent.history(BOSS)] == ["request", "response"]  # the turn is committed
    assert "could not write turn" in caplog.text and "disk full" in caplog.text
    await agent.handover.aclose()


async def test_a_profiles_skills_limit_what_the_sub_agent_sees(tmp_path: Path) -> None:
    """ship.json ``profiles.<name>.skills``: the sub-agent's overview and skills tools hold only those."""
    root = project(
        tmp_path,
        {
            "writer": {"instructions": "You write.", "skills": ["style-guide"]},
            "anyone": {"instructions": "You help."},
        },
    )
    for name in ("style-guide", "deploy-runbook"):
        skill = root / "skills" / name
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: the {name} skill\n---\nbody\n")
    writer = Recorder(call_then("skills_list", {}, lambda m: json.dumps(tool_returns(m)[0])))
    anyone = Recorder(text("ok"))
    tasks = [
        {"profile_name": "writer", "instruction": "List your skills."},
        {"profile_name": "anyone", "instruction": "Hi."},
    ]
    boss = Recorder(call_then("fork_join", {"tasks": tasks}, lambda m: "joined"))
    agent = ShipAgent.from_project(
        root, model=boss.model, profile_models={"writer": writer.model, "anyone": anyone.model}
    )
    async with agent:
        assert (await agent.run(BOSS, "go")).success

    writer_instructions = writer.infos[0].instructions or ""
    assert "style-guide — the style-guide skill" in writer_instructions
    assert "deploy-runbook" not in writer_instructions
    listed = tool_returns(writer.requests[-1])[0]
    assert [s["id"] for s in listed["skills"]] == ["style-guide"]
    # a profile without ``skills`` keeps them all, and so does the orchestrator
    assert "deploy-runbook" in (anyone.infos[0].instructions or "")
    assert "deploy-runbook" in (boss.infos[0].instructions or "")
