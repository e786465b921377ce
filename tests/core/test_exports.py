"""What ``shipagent`` and each of its packages export: pinned, small, and every name documented.

A package's ``__all__`` is its promise to users and to the other layers. Names only its own
modules (or tests) need are imported from the private module that defines them, so the facades
stay small enough to read; a name that joins or leaves one is a deliberate change made here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
from pathlib import Path
from types import ModuleType

import pytest

import shipagent

EXPORTS: dict[str, list[str]] = {
    "shipagent": [
        "AgentResult",
        "ApprovalRequest",
        "ApprovalRequired",
        "BadRequestError",
        "ChatKeyError",
        "Compacted",
        "ConfigError",
        "Done",
        "InjectionResult",
        "NotFoundError",
        "Pin",
        "Problem",
        "ProjectLockedError",
        "ReplyChannel",
        "Sender",
        "ShipAgent",
        "ShipAgentError",
        "ShipConfig",
        "StepEvent",
        "TextDelta",
        "ToolCallRecord",
        "ToolContextError",
        "ToolExecutionContext",
        "ToolFinished",
        "ToolStarted",
        "TurnDeps",
        "check_project",
        "current_tool_context",
        "load_config",
    ],
    "shipagent.agent": ["ShipAgent"],
    "shipagent.hosts": [],
    "shipagent.hosts.channels": [
        "COMMANDS",
        "AccessRules",
        "Attachment",
        "Button",
        "ButtonPress",
        "Capabilities",
        "Channel",
        "ChannelHealth",
        "ChannelHost",
        "ChannelsConfig",
        "Dedupe",
        "GroupsConfig",
        "InboundMessage",
        "MarkupRejected",
        "Outbound",
        "PairingError",
        "PairingStore",
        "PendingCode",
        "PermanentSendError",
        "Pipeline",
        "PipelineOptions",
        "SentMessage",
        "TelegramConfig",
        "TransientSendError",
        "channels_from_config",
        "split_markdown",
    ],
    "shipagent.tools.context": [
        "AgentInstanceMeta",
        "ContextProvider",
        "EventBus",
        "McpServerStdio",
        "PoolSnapshot",
        "ProviderInjector",
        "ProviderRuntime",
        "ProviderSession",
        "ProviderTool",
        "Resource",
        "ResourcePool",
        "SessionTokenStore",
        "build_agent_context",
        "context_to_system_prompt",
    ],
    "shipagent.hosts.durable": [
        "DurableExecutor",
        "DurableSettings",
        "claim_executor_id",
        "recover_executors",
        "resolve_settings",
    ],
    "shipagent.tools.files": [
        "NO_SPILL_METADATA",
        "CatalogToolset",
        "ContextFiles",
        "ContextKind",
        "ContextRef",
        "Page",
        "SpillToolset",
        "Tail",
        "context_files_for",
        "context_toolset",
    ],
    "shipagent.tools.handover": [
        "CARD_CHAT_MESSAGE",
        "Box",
        "BoxId",
        "Card",
        "CardBoxStore",
        "CardContent",
        "FieldsSchemaContent",
        "Handover",
        "HandoverPacker",
        "JsonContent",
        "NewCard",
        "ResolvedProfile",
        "SqliteCardBoxStore",
        "TextContent",
    ],
    "shipagent.window": [],
    "shipagent.hosts.cli": [],
    "shipagent.hosts.channels.telegram": ["TelegramChannel", "chat_key_of", "markdown_to_html"],
    "shipagent.hosts.channels.slack": ["SlackChannel", "chat_key_of", "markdown_to_mrkdwn"],
    "shipagent.hosts.channels.discord": ["DiscordChannel", "chat_key_of", "discord_markdown", "intents"],
    "shipagent.hosts.channels.feishu": ["FeishuChannel", "chat_key_of", "post_content"],
    "shipagent.hosts.channels.qq": ["INTENTS", "QQChannel", "chat_key_of", "plain_text"],
    "shipagent.store.files": ["ContextFiles", "ContextKind", "ContextRef", "Page", "Tail"],
    "shipagent.store.cards": [
        "CARD_CHAT_MESSAGE",
        "Box",
        "BoxId",
        "Card",
        "CardBoxStore",
        "CardContent",
        "FieldsSchemaContent",
        "JsonContent",
        "NewCard",
        "SqliteCardBoxStore",
        "TextContent",
    ],
    "shipagent.agent.ledger": ["Ledger", "LedgerItem", "LedgerReferenceError", "RequestRecord"],
    "shipagent.tools.mcp": ["McpManager", "McpServerStatus"],
    "shipagent.hosts.serve": ["ApiKey", "Auth", "create_app", "uvicorn_options"],
    "shipagent.store": [
        "AgentContextStore",
        "Committed",
        "ContextFileStore",
        "FileStores",
        "LogRecord",
        "MemoryStores",
        "MessageLogStore",
        "MigrationRow",
        "PgStores",
        "RecordLog",
        "Stores",
        "TranscriptStore",
        "TurnWrite",
        "migrate",
        "open_stores",
    ],
    "shipagent.tools": [
        "BUILTIN_TOOL_NAMES",
        "ShellDecision",
        "SkillsCache",
        "builtin_toolset",
        "decide_exec_shell",
        "load_tool_modules",
        "request_approval",
        "sandbox_check_hook",
        "sandbox_report",
        "warn_if_unsandboxed",
    ],
}
"""Every package of ``shipagent`` and the names its ``__all__`` lists, as users may import them."""

FORMER_NAMES = {
    "shipagent.tools.context": {
        "AgentContext": "PoolSnapshot",
        "AgentContextRuntime": "ProviderRuntime",
        "SessionContext": "ProviderSession",
        "SessionContextInjector": "ProviderInjector",
    },
}
"""Names renamed so that each word has one meaning, still importable as the object they became."""

PACKAGE_ROOT = Path(shipagent.__file__).parent


def _dotted(folder: Path) -> str:
    return ".".join(folder.relative_to(PACKAGE_ROOT.parent).parts)


def _packages() -> list[str]:
    return ["shipagent", *sorted(_dotted(init.parent) for init in PACKAGE_ROOT.glob("*/**/__init__.py"))]


def test_every_package_is_pinned() -> None:
    # a package added without a line in EXPORTS (or a folder left without ``__init__.py``, a
    # namespace package whose documentation has nowhere to live) fails here
    folders = sorted(
        _dotted(p)
        for p in PACKAGE_ROOT.rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    )
    assert sorted(EXPORTS) == sorted(["shipagent", *folders])
    assert _packages() == sorted(EXPORTS, key=lambda n: (n != "shipagent", n))


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_exports_are_pinned_and_sorted(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert exported == EXPORTS[package]
    # sorted the way ruff's RUF022 sorts ``__all__``: constants, then classes, then functions
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_exports_are_importable_and_documented(package: str) -> None:
    module = importlib.import_module(package)
    assert inspect.getdoc(module), f"{package} has no docstring"
    for name in EXPORTS[package]:
        value = getattr(module, name)  # lazy names load here
        assert _documented(module, name, value), f"{package}.{name} has no docstring"


def test_former_names_still_import() -> None:
    for package, renamed in FORMER_NAMES.items():
        module = importlib.import_module(package)
        for old, new in renamed.items():
            assert getattr(module, old) is getattr(module, new)
            assert old not in module.__all__  # importable, no longer advertised


def _documented(package: ModuleType, name: str, value: object) -> bool:
    """Whether ``name`` carries its own docstring where it is defined.

    Classes and functions: a docstring written in their body (a dataclass without one gets its
    signature as ``__doc__``, which documents nothing). Constants and type aliases: the string
    literal right after the assignment, which is what the reference pages show.
    """
    if inspect.isclass(value) or inspect.isfunction(value):
        try:
            source = inspect.getsource(value)
        except (OSError, TypeError):
            return bool(value.__doc__)
        node = ast.parse(inspect.cleandoc("\n" + source) if source[:1].isspace() else source).body[0]
        assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        return bool(ast.get_docstring(node))
    return _has_attribute_docstring(package, name)


def _has_attribute_docstring(package: ModuleType, name: str) -> bool:
    """Whether some module of ``package`` assigns ``name`` and follows it with a string literal."""
    folder = Path(package.__file__ or "").parent
    # a facade may hand on a name of another package (``tools.files`` the data names of
    # ``store.files``): then the assignment is in some module of shipagent
    files = (
        [*sorted(folder.glob("*.py")), *sorted(PACKAGE_ROOT.rglob("*.py"))]
        if package.__name__ != "shipagent"
        else [Path(package.__file__ or "")]
    )
    for path in files:
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for stmt, after in itertools.pairwise(body):
            targets = (
                [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else stmt.targets
                if isinstance(stmt, ast.Assign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return True
    return False


def test_the_packages_page_shows_every_package() -> None:
    # the reference renders each package's ``__all__`` with its docstrings; a package missing
    # there would be importable but undocumented
    page = PACKAGE_ROOT.parent / "docs" / "reference" / "packages.md"
    shown = [line.removeprefix("::: ") for line in page.read_text(encoding="utf-8").splitlines()]
    assert sorted(p for p in shown if p.startswith("shipagent.")) == sorted(set(EXPORTS) - {"shipagent"})
