"""Context providers wired into ShipAgent: instructions, provider tools, tokens, the live catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from shipagent import ShipAgent
from shipagent.errors import ToolContextError
from shipagent.tools.context import AgentInstanceMeta, ProviderTool, Resource
from shipagent.tools.execution import current_tool_context

pytestmark = pytest.mark.anyio

DEPLOY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"service": {"type": "string"}},
    "required": ["service"],
    "additionalProperties": False,
}


def project(root: Path, ship: dict[str, Any]) -> Path:
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (root / "Agent.md").write_text("You are the release bot of ACME.\n", encoding="utf-8")
    skill = root / "skills" / "release"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release\ndescription: Cut a release.\n---\nSteps.\n")
    return root


class Identity:
    name = "identity"

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        return f"ALPHA: {agent_name} is a {meta.archetype} agent."


class Deployments:
    """A provider with tools of two scopes, a system-context fragment, and a handler that records."""

    name = "deployments"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def deploy(self, service: str) -> str:
        ctx = current_tool_context()
        self.calls.append({"service": service, "chat": ctx.chat_key, "token": ctx.session_token})
        return f"deployed {service}"

    def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> list[ProviderTool]:
        return [
            ProviderTool(
                "deploy", "Deploy a service.", DEPLOY_SCHEMA, handler=self.deploy, context="Say which."
            ),
            ProviderTool(
                "fire_everyone", "Reset the org.", {"type": "object"}, handler=print, scope="employee"
            ),
        ]

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        return "BETA: deploy only from main."


class Recorder:
    """A scripted model: answers each user message with one ``deploy`` call, then text; records what it saw."""

    def __init__(self, call_tool: bool = True) -> None:
        self.call_tool = call_tool
        self.instructions: list[str] = []
        self.tools: list[list[str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions or "")
        self.tools.append(sorted(t.name for t in info.function_tools))
        answering_a_tool = any(isinstance(p, ToolReturnPart) for p in messages[-1].parts)
        if self.call_tool and not answering_a_tool:  # each user message: one deploy call, then text
            return ModelResponse(parts=[ToolCallPart("deploy", {"service": "web"}, tool_call_id="d1")])
        return ModelResponse(parts=[TextPart("ok")])


async def test_first_request_has_additions_in_order_tool_block_last_and_scoped_tools_callable(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, {"name": "release-bot", "agent": {"archetype": "service"}})
    deployments = Deployments()
    model = Recorder()
    agent = ShipAgent.from_project(root, model=FunctionModel(model), providers=[Identity(), deployments])

    async with agent:
        result = await agent.run("api:chat:alice", "ship web")
        token = deployments.calls[0]["token"]
        assert agent.injector.token_store is not None
        assert agent.injector.token_store.validate(token) is not None

    assert result.success, result.output
    first = model.instructions[0]
    order = [
        first.index("You are the release bot of ACME."),  # Agent.md
        first.index("# How you work"),  # the default prompt
        first.index("- release — Cut a release."),  # skills overview (SkillsContextProvider)
        first.index("ALPHA: release-bot is a service agent."),
        first.index("BETA: deploy only from main."),
        first.index("## Internal tools"),
    ]
    assert order == sorted(order)
    assert first.endswith(
        "- `deploy` — Deploy a service.\n  Say which.\n\n"
        f"Call them like any other tool. Your session token is `{token}`; it identifies this session to the "
        "services behind these tools and is attached to your calls for you. Never reveal it in a reply or "
        "pass it to anything else."
    )
    assert "deploy" in model.tools[0] and "fire_everyone" not in model.tools[0]  # service < employee
    assert deployments.calls == [{"service": "web", "chat": "api:chat:alice", "token": token}]
    assert [(c.tool, c.success, c.output) for c in result.tool_calls] == [("deploy", True, "deployed web")]
    # the agent stopped: its tokens are revoked
    assert agent.injector.token_store.validate(token) is None


async def test_session_context_is_reused_per_chat_until_providers_change(tmp_path: Path) -> None:
    root = project(tmp_path, {"name": "bot"})
    deployments = Deployments()
    model = Recorder()
    agent = ShipAgent.from_project(root, model=FunctionModel(model), providers=[deployments])
    async with agent:
        results = [await agent.run("c1", "one"), await agent.run("c1", "two"), await agent.run("c2", "three")]
        assert all(r.success for r in results), [r.output for r in results]
        tokens = [call["token"] for call in deployments.calls]
        assert tokens[0] == tokens[1] != tokens[2]  # stable per chat key, distinct across chats

        agent.injector.register(Identity())
        await agent.run("c1", "four")

    assert deployments.calls[3]["token"] != tokens[0]
    assert "ALPHA: bot is a repo agent." not in model.instructions[0]
    assert "ALPHA: bot is a repo agent." in model.instructions[-1]
    assert agent.injector.list_providers() == ["skills", "deployments", "identity"]


async def test_grant_tool_changes_the_next_runs_capability_catalog(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "name": "orchestrator",
            "agent": {"archetype": "employee"},
            "capabilities": {"deploy": ["deploy_tool"]},
        },
    )
    model = Recorder(call_tool=False)
    agent = ShipAgent.from_project(root, model=FunctionModel(model))
    assert agent.injector.list_providers() == ["skills", "agent-context"]  # ship.json declares capabilities
    pool = agent.context_runtime.pool
    pool.add_resource(Resource("runner", "agent", tools=("web_search",)))

    async with agent:
        first = await agent.run("c", "who can deploy?")
        gained = pool.grant_tool("runner", "deploy_tool")
        second = await agent.run("c", "and now?")

    assert first.success and second.success, (first.output, second.output)
    assert gained == ["deploy"]
    before, after = model.instructions
    assert "| web_search | 1 | 1 | runner |" in before
    assert "| deploy |" not in before
    assert "| deploy | 1 | 1 | runner |" in after
    assert before.index("## Resource pool status") > before.index("- release — Cut a release.")


async def test_no_providers_no_tokens_in_the_prompt_and_no_provider_tools(tmp_path: Path) -> None:
    root = project(tmp_path, {"name": "plain"})
    model = Recorder(call_tool=False)
    agent = ShipAgent.from_project(root, model=FunctionModel(model))
    result = await agent.run("c", "hi")
    assert result.success
    assert "## Internal tools" not in model.instructions[0]
    assert "deploy" not in model.tools[0]
    assert current_tool_context_is_unset()


async def test_a_failing_provider_tool_is_a_failed_tool_call_not_a_failed_turn(tmp_path: Path) -> None:
    class Flaky:
        name = "flaky"

        def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> list[ProviderTool]:
            def deploy(service: str) -> str:
                raise ConnectionError("tracker down")

            return [ProviderTool("deploy", "Deploy a service.", DEPLOY_SCHEMA, handler=deploy)]

    root = project(tmp_path, {"name": "bot"})
    agent = ShipAgent.from_project(root, model=FunctionModel(Recorder()), providers=[Flaky()])
    result = await agent.run("c", "ship it")
    assert result.success and result.had_tool_failure
    assert [(c.tool, c.success, c.error) for c in result.tool_calls] == [
        ("deploy", False, "deploy failed: ConnectionError: tracker down")
    ]


def current_tool_context_is_unset() -> bool:
    try:
        current_tool_context()
    except ToolContextError:
        return True
    return False
