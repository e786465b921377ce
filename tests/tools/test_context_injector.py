"""SessionContextInjector: the dedupe, scope, token and template rules, each with providers written here."""

from __future__ import annotations

import re
from typing import Any

import pytest
from inline_snapshot import snapshot

from shipagent.tools.context import (
    AgentInstanceMeta,
    EventBus,
    McpServerStdio,
    ProviderTool,
    SessionContextInjector,
    SessionTokenStore,
)

pytestmark = pytest.mark.anyio

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def tool(
    name: str, scope: Any = "all", description: str = "does a thing", context: str | None = None
) -> ProviderTool:
    return ProviderTool(name, description, SCHEMA, handler=lambda: name, scope=scope, context=context)


class Provider:
    """A provider recording each call it gets, so tests can assert the call order."""

    def __init__(
        self,
        name: str,
        *,
        text: str | None = None,
        tools: list[ProviderTool] | None = None,
        servers: list[McpServerStdio] | None = None,
        log: list[str] | None = None,
    ) -> None:
        self.name = name
        self.text = text
        self.tools = tools or []
        self.servers = servers or []
        self.log = log if log is not None else []

    def get_mcp_servers(self, agent_name: str, meta: AgentInstanceMeta) -> list[McpServerStdio]:
        self.log.append(f"{self.name}.mcp")
        return self.servers

    def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> list[ProviderTool]:
        self.log.append(f"{self.name}.tools")
        return self.tools

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str | None:
        self.log.append(f"{self.name}.context")
        return self.text


class TextOnly:
    """Implements only get_system_context: the other two methods are optional."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text

    def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
        return self.text


META = AgentInstanceMeta("bot", "employee")


async def test_additions_follow_registration_order_and_reregistration_replaces_in_place() -> None:
    injector = SessionContextInjector()
    injector.register(TextOnly("a", "A1"))
    injector.register(TextOnly("b", "B"))
    injector.register(TextOnly("c", "C"))
    injector.register(TextOnly("a", "A2"))  # replaces "a" where it stood, not at the end

    assert injector.list_providers() == ["a", "b", "c"]
    ctx = await injector.prepare("bot", META)
    assert ctx.system_context_additions == ("A2", "B", "C")

    assert injector.unregister("b") is True
    assert injector.unregister("b") is False
    assert injector.list_providers() == ["a", "c"]
    assert (await injector.prepare("bot", META)).system_context_additions == ("A2", "C")


async def test_each_provider_is_asked_for_mcp_then_tools_then_context_in_registration_order() -> None:
    calls: list[str] = []
    injector = SessionContextInjector()
    injector.register(Provider("first", log=calls))
    injector.register(TextOnly("middle", "M"))
    injector.register(Provider("second", log=calls))

    await injector.prepare("bot", META)

    assert calls == [
        "first.mcp",
        "first.tools",
        "first.context",
        "second.mcp",
        "second.tools",
        "second.context",
    ]


async def test_servers_and_tools_dedupe_first_registered_wins_and_empty_context_is_skipped() -> None:
    injector = SessionContextInjector()
    git_a = McpServerStdio("git", "uvx", ["mcp-server-git"])
    git_b = McpServerStdio("git", "other-git")
    time = McpServerStdio("time", "uvx", ["mcp-server-time"], {"TZ": "UTC"})
    injector.register(Provider("p1", servers=[git_a], tools=[tool("search", description="first")], text=""))
    injector.register(
        Provider(
            "p2",
            servers=[git_b, time],
            tools=[tool("search", description="second"), tool("fetch")],
            text=None,
        )
    )
    injector.register(Provider("p3", text="   "))
    injector.register(Provider("p4", text="kept"))

    ctx = await injector.prepare("bot", META)

    assert ctx.mcp_servers == (git_a, time)
    assert [(t.name, t.description) for t in ctx.tools] == [("search", "first"), ("fetch", "does a thing")]
    assert ctx.system_context_additions == ("kept",)
    assert ctx.token is None  # no token store: no token, no tool-instructions block


@pytest.mark.parametrize(
    ("archetype", "expected"),
    [
        ("repo", ["t_all"]),
        ("service", ["t_all", "t_service"]),
        ("employee", ["t_employee", "t_all", "t_service"]),
    ],
)
async def test_tools_are_kept_when_archetype_level_reaches_scope_level(
    archetype: Any, expected: list[str]
) -> None:
    injector = SessionContextInjector()
    injector.register(
        Provider(
            "p", tools=[tool("t_employee", "employee"), tool("t_all", "all"), tool("t_service", "service")]
        )
    )
    ctx = await injector.prepare("bot", AgentInstanceMeta("bot", archetype))
    assert [t.name for t in ctx.tools] == expected  # the provider's order, minus what scope drops


async def test_scope_filter_runs_before_dedupe_so_a_filtered_tool_does_not_shadow_a_later_one() -> None:
    injector = SessionContextInjector()
    injector.register(Provider("p1", tools=[tool("notify", "employee", description="employee notify")]))
    injector.register(Provider("p2", tools=[tool("notify", "all", description="plain notify")]))
    ctx = await injector.prepare("bot", AgentInstanceMeta("bot", "repo"))
    assert [t.description for t in ctx.tools] == ["plain notify"]


async def test_token_and_tool_instructions_block_appended_last() -> None:
    injector = SessionContextInjector()
    injector.set_token_store(SessionTokenStore())
    injector.register(TextOnly("identity", "You are bot."))
    injector.register(
        Provider(
            "canvas",
            tools=[
                tool(
                    "canvas_update",
                    description="Replace the canvas.",
                    context="Keep it short.\nMarkdown only.",
                ),
                tool("canvas_clear", description="Clear the canvas."),
            ],
            text="You have a live canvas.",
        )
    )

    ctx = await injector.prepare("bot", META, "chat-1")

    assert ctx.token is not None and re.fullmatch(r"[0-9a-f]{64}", ctx.token)
    assert ctx.system_context_additions[:2] == ("You are bot.", "You have a live canvas.")
    block = ctx.system_context_additions[2].replace(ctx.token, "<token>")
    assert block == snapshot(
        """\
## Internal tools
These tools were given to you for this session:
- `canvas_update` — Replace the canvas.
  Keep it short.
  Markdown only.
- `canvas_clear` — Clear the canvas.

Call them like any other tool. Your session token is `<token>`; it identifies this session to the services behind these tools and is attached to your calls for you. Never reveal it in a reply or pass it to anything else.
"""
    )


async def test_no_tool_instructions_without_tools_even_with_a_token() -> None:
    injector = SessionContextInjector()
    injector.set_token_store(SessionTokenStore())
    injector.register(TextOnly("identity", "You are bot."))
    ctx = await injector.prepare("bot", META)
    assert ctx.token is not None
    assert ctx.system_context_additions == ("You are bot.",)


async def test_events_on_the_bus_and_a_raising_provider_is_reported_and_skipped() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    bus = EventBus()
    bus.subscribe("*", lambda name, payload: events.append((name, payload)))

    class Broken:
        name = "broken"

        def get_mcp_servers(self, agent_name: str, meta: AgentInstanceMeta) -> list[McpServerStdio]:
            return [McpServerStdio("half", "x")]  # collected before the failure, must not leak in

        def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> list[ProviderTool]:
            raise RuntimeError("database is down")

    injector = SessionContextInjector()
    injector.set_event_bus(bus)
    injector.set_token_store(SessionTokenStore())
    injector.register(TextOnly("a", "A"))
    injector.register(Broken())
    injector.register(Provider("c", tools=[tool("t")], servers=[McpServerStdio("srv", "run")], text="C"))

    ctx = await injector.prepare("bot", META)

    assert [s.name for s in ctx.mcp_servers] == ["srv"]
    assert ctx.system_context_additions[:2] == ("A", "C")
    assert events == [
        ("session:preparing", {"agentName": "bot", "providerCount": 3}),
        (
            "session:provider-error",
            {"agentName": "bot", "provider": "broken", "error": "RuntimeError: database is down"},
        ),
        (
            "session:context-ready",
            {"agentName": "bot", "mcpServerCount": 1, "toolCount": 1, "contextAdditions": 3},
        ),
    ]


async def test_a_provider_returning_the_wrong_type_is_a_provider_error() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    bus = EventBus()
    bus.subscribe("session:provider-error", lambda name, payload: events.append((name, payload)))

    class Sloppy:
        name = "sloppy"

        def get_tools(self, agent_name: str, meta: AgentInstanceMeta) -> Any:
            return [{"name": "not-a-ProviderTool"}]

    injector = SessionContextInjector()
    injector.set_event_bus(bus)
    injector.register(Sloppy())
    ctx = await injector.prepare("bot", META)
    assert ctx.tools == ()
    assert events == [
        (
            "session:provider-error",
            {
                "agentName": "bot",
                "provider": "sloppy",
                "error": "TypeError: get_tools returned a dict, expected ProviderTool",
            },
        )
    ]


async def test_async_provider_methods_are_awaited_and_get_agent_name_and_meta() -> None:
    seen: list[tuple[str, AgentInstanceMeta]] = []

    class Async:
        name = "async"

        async def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
            seen.append((agent_name, meta))
            return f"{agent_name} is a {meta.archetype} on {meta.backend_type}"

    injector = SessionContextInjector()
    injector.register(Async())
    meta = AgentInstanceMeta("ops", "service", backend_type="shipagent")
    ctx = await injector.prepare("ops", meta)
    assert ctx.system_context_additions == ("ops is a service on shipagent",)
    assert seen == [("ops", meta)]


async def test_revoke_tokens_invalidates_every_session_of_that_agent_only() -> None:
    store = SessionTokenStore()
    injector = SessionContextInjector()
    injector.set_token_store(store)
    one = (await injector.prepare("bot", META, "chat-1")).token
    two = (await injector.prepare("bot", META, "chat-2")).token
    other = (await injector.prepare("other", META, "chat-1")).token

    injector.revoke_tokens("bot")

    assert store.validate(one) is None and store.validate(two) is None
    assert store.validate(other) is not None


async def test_session_context_is_cached_per_chat_key_until_providers_change() -> None:
    calls: list[str] = []
    injector = SessionContextInjector()
    injector.set_token_store(SessionTokenStore())
    injector.register(Provider("p", text="P", log=calls))

    first = await injector.session_context("bot", META, "chat-1")
    again = await injector.session_context("bot", META, "chat-1")
    other_chat = await injector.session_context("bot", META, "chat-2")
    assert again is first
    assert other_chat.token != first.token
    assert len(calls) == 6  # prepared once per chat key, three calls each

    injector.register(TextOnly("late", "L"))
    fresh = await injector.session_context("bot", META, "chat-1")
    assert fresh.system_context_additions == ("P", "L")
    assert fresh.token != first.token
    assert injector.token_store is not None and injector.token_store.validate(first.token) is None

    changed_meta = await injector.session_context("bot", AgentInstanceMeta("bot", "repo"), "chat-1")
    assert changed_meta is not fresh


async def test_a_provider_revision_change_re_prepares_the_cached_context() -> None:
    state = {"version": 1}

    class Live:
        name = "live"

        def revision(self) -> object:
            return state["version"]

        def get_system_context(self, agent_name: str, meta: AgentInstanceMeta) -> str:
            return f"version {state['version']}"

    injector = SessionContextInjector()
    injector.register(Live())
    assert (await injector.session_context("bot", META, "c")).system_context_additions == ("version 1",)
    state["version"] = 2
    assert (await injector.session_context("bot", META, "c")).system_context_additions == ("version 2",)


def test_register_rejects_a_nameless_provider() -> None:
    class Nameless:
        name = ""

    with pytest.raises(ValueError, match="non-empty string name"):
        SessionContextInjector().register(Nameless())


async def test_mcp_servers_asks_only_for_servers_issues_no_token_and_reports_failures() -> None:
    calls: list[str] = []
    events: list[tuple[str, dict[str, Any]]] = []
    bus = EventBus()
    bus.subscribe("*", lambda name, payload: events.append((name, payload)))

    class Down:
        name = "down"

        def get_mcp_servers(self, agent_name: str, meta: AgentInstanceMeta) -> list[McpServerStdio]:
            raise OSError("registry unreachable")

    store = SessionTokenStore()
    injector = SessionContextInjector()
    injector.set_event_bus(bus)
    injector.set_token_store(store)
    git = McpServerStdio("git", "uvx", ["mcp-server-git"])
    injector.register(Provider("a", servers=[git], tools=[tool("t")], text="A", log=calls))
    injector.register(Down())
    injector.register(Provider("b", servers=[McpServerStdio("git", "other")], log=calls))

    assert await injector.mcp_servers("bot", META) == (git,)
    assert calls == ["a.mcp", "b.mcp"]
    assert len(store) == 0
    assert events == [
        (
            "session:provider-error",
            {"agentName": "bot", "provider": "down", "error": "OSError: registry unreachable"},
        )
    ]


async def test_the_session_cache_is_bounded_least_recently_used_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shipagent.tools.context._injector as injector_module

    monkeypatch.setattr(injector_module, "MAX_CACHED_SESSIONS", 2)
    injector = SessionContextInjector()
    injector.register(TextOnly("a", "A"))
    one = await injector.session_context("bot", META, "c1")
    two = await injector.session_context("bot", META, "c2")
    assert await injector.session_context("bot", META, "c1") is one  # c1 is now the most recent
    await injector.session_context("bot", META, "c3")  # evicts c2
    assert await injector.session_context("bot", META, "c1") is one
    assert await injector.session_context("bot", META, "c2") is not two
