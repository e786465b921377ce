"""``shipagent check``: every problem that would make a turn fail, found before the first turn.

:func:`check_project` is pure reporting — it never starts a server or calls a model — and returns
:class:`Problem` s: ``error`` for what would make a turn fail (no model, a missing API key, an
unknown provider, an ``openai-compatible`` provider without ``baseUrl``, a tool module that does
not import, a profile whose ``agentMd`` is missing, an ``Agent.md`` linking out of the project,
compaction bounds that cannot work) and ``warning`` for what degrades a turn without failing it
(an MCP server whose command is not on PATH). ``shipagent check`` prints them and exits 1 on an
error; ``shipagent chat`` runs the same checks before it shows the prompt.

More checks plug in through :data:`PROJECT_CHECKS` (e.g. the exec_shell sandbox report).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic_ai.models import Model

from ...agent.instructions import agent_md_problem
from ...agent.models import build_model
from ...config import McpStdioServer, ShipConfig, load_config
from ...errors import ConfigError, ShipAgentError
from ...tools import sandbox_report
from ...tools._loader import load_tool_module

__all__ = ["PROJECT_CHECKS", "Problem", "ProjectCheck", "check_project", "has_errors"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of :func:`check_project`.

    Attributes:
        level: ``error`` (a turn would fail) or ``warning`` (a turn runs, with less).
        message: what is wrong and what to change, in one line.
        key: the ship.json key path at fault (``llm.model``, ``mcp.servers.git.command``), if any.
        detail: a library's or server's own text behind the problem, shown on a line of its own
            (the message is ours and says what to change; this is for the curious and for bug reports).
    """

    level: Literal["error", "warning"]
    message: str
    key: str | None = None
    detail: str | None = None


ProjectCheck = Callable[[Path, ShipConfig], Iterable[Problem]]
"""A check: ``(project root, validated ship.json) -> problems``. Must not start anything."""


def _error(exc: ShipAgentError) -> Problem:
    return Problem("error", str(exc), getattr(exc, "path", None))


def check_model(root: Path, config: ShipConfig, model: Model | str | None = None) -> list[Problem]:
    """No model, an unknown provider, a missing API key, ``openai-compatible`` without ``baseUrl``."""
    try:
        build_model(config.llm, model)
    except ShipAgentError as exc:
        return [_error(exc)]
    return []


def check_history(root: Path, config: ShipConfig) -> list[Problem]:
    """Compaction keeps fewer messages than it is triggered at, or it would never shrink anything."""
    history = config.context.chat_history
    if history.compact_keep_last_messages >= history.in_memory_max_messages:
        return [
            Problem(
                "error",
                f"context.chatHistory.compactKeepLastMessages ({history.compact_keep_last_messages}) must be "
                f"smaller than inMemoryMaxMessages ({history.in_memory_max_messages}): compaction would keep "
                "everything and the history would grow without bound",
                "context.chatHistory.compactKeepLastMessages",
            )
        ]
    return []


@contextmanager
def _importable_from(root: Path) -> Iterator[None]:
    """Modules beside ship.json are importable, as the agent makes them (and only meanwhile)."""
    entry = str(root.resolve())
    added = entry not in sys.path
    if added:
        sys.path.append(entry)  # last, as the agent does: nothing beside ship.json shadows the stdlib
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def check_tool_modules(root: Path, config: ShipConfig) -> list[Problem]:
    """Each ``tools.modules`` entry imports and has a pydantic-ai ``toolset``."""
    problems: list[Problem] = []
    with _importable_from(root):
        for index, name in enumerate(config.tools.modules):
            try:
                load_tool_module(name, index)
            except ConfigError as exc:
                problems.append(_error(exc))
    return problems


def check_profiles(root: Path, config: ShipConfig) -> list[Problem]:
    """A profile's ``agentMd`` exists inside the project; its ``model`` can be built (a warning:
    only delegations to that profile fail)."""
    problems: list[Problem] = []
    project = root.resolve()
    for name, profile in config.profiles.items():
        if profile.agent_md:
            key = f"profiles.{name}.agentMd"
            path = (project / profile.agent_md).resolve()
            if not path.is_relative_to(project):
                problems.append(
                    Problem("error", f"{key}: {profile.agent_md!r} points outside the project", key)
                )
            elif not path.is_file():
                problems.append(
                    Problem(
                        "error",
                        f"{key}: file {profile.agent_md!r} does not exist (relative to {project})",
                        key,
                    )
                )
        if profile.model:
            llm = config.llm.model_copy(update={"model": profile.model})
            try:
                build_model(llm)
            except ShipAgentError as exc:
                problems.append(Problem("warning", f"profiles.{name}.model: {exc}", f"profiles.{name}.model"))
    return problems


def check_agent_md(root: Path, config: ShipConfig) -> list[Problem]:
    """``Agent.md`` is a symlink out of the project: every turn would refuse it."""
    problem = agent_md_problem(root)
    return [] if problem is None else [Problem("error", problem)]


def check_mcp_commands(root: Path, config: ShipConfig) -> list[Problem]:
    """Enabled stdio MCP servers whose command cannot be found (their tools will be missing)."""
    problems: list[Problem] = []
    for name, server in config.mcp.servers.items():
        if not isinstance(server, McpStdioServer) or not server.enabled:
            continue
        key = f"mcp.servers.{name}.command"
        cwd = (root / server.cwd).resolve() if server.cwd else root
        command = server.command
        if os.sep in command or command.startswith("."):
            found = (cwd / command).exists()
        else:
            path = server.env.get("PATH", os.environ.get("PATH", os.defpath))
            found = shutil.which(command, path=path) is not None
        if not found:
            problems.append(
                Problem(
                    "warning",
                    f"{key}: {command!r} is not on PATH; the server will not start and its tools will be "
                    "missing (install it, or set mcp.servers." + name + ".enabled to false)",
                    key,
                )
            )
    return problems


def check_sandbox(root: Path, config: ShipConfig) -> list[Problem]:
    """exec_shell's sandbox: ``required`` but unavailable (error), unavailable in ``auto`` (warning)."""
    return [
        Problem(level, message, "permissions.execShell") for level, message in sandbox_report(config, root)
    ]


PROJECT_CHECKS: list[ProjectCheck] = [
    check_history,
    check_agent_md,
    check_tool_modules,
    check_profiles,
    check_mcp_commands,
    check_sandbox,
]
"""The checks :func:`check_project` runs after the model check, in order.

Plug more in by appending (a subsystem's own report, e.g. the exec_shell sandbox:
``PROJECT_CHECKS.append(lambda root, config: [Problem(level, msg) for level, msg in
sandbox_report(config)])``).
"""


def check_project(
    root: Path,
    *,
    config: ShipConfig | None = None,
    model: Model | str | None = None,
    include_model: bool = True,
) -> list[Problem]:
    """Everything that would make a turn of the project at ``root`` fail (errors) or degrade (warnings).

    Args:
        root: the project directory.
        config: its validated ship.json (loaded from ``root`` when omitted).
        model: a model override (``-m``), checked instead of ``llm.model``.
        include_model: ``False`` when the caller builds the model itself.

    A ship.json that does not load is one error (with its key path); nothing else is checked then.
    """
    if config is None:
        try:
            config = load_config(root)
        except ShipAgentError as exc:
            return [_error(exc)]
    problems = check_model(root, config, model) if include_model else []
    for check in PROJECT_CHECKS:
        try:
            problems.extend(check(root, config))
        except Exception as exc:  # a broken check must not hide the others
            problems.append(Problem("warning", f"check {getattr(check, '__name__', check)!r} failed: {exc}"))
    return problems


def has_errors(problems: Iterable[Problem]) -> bool:
    """Whether any problem would make a turn fail."""
    return any(p.level == "error" for p in problems)
