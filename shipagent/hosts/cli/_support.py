"""Pieces of the ``shipagent`` command that are not commands: version, project checks before a
chat, ``.gitignore`` for ``init``, and a clean exit on Ctrl-C.

Kept out of ``cli.py`` so the command table stays readable and other rooms can reuse them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ...chatkeys import validate_chat_key
from ...config import load_config
from ...errors import ConfigError, ShipAgentError

if TYPE_CHECKING:  # pydantic-ai loads when a command needs an agent, not for ``shipagent --help``
    from ...agent._agent import ShipAgent
    from ._checks import Problem

__all__ = [
    "configure_logging",
    "ensure_gitignore",
    "interruptible",
    "preflight",
    "print_problems",
    "version_text",
]

T = TypeVar("T")
INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def version_text() -> str:
    """``shipagent <version>`` (and pydantic-ai's, which decides much of the behaviour)."""
    try:
        own = metadata.version("shipagent")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        own = "unknown"
    try:
        pydantic_ai = metadata.version("pydantic-ai-slim")
    except metadata.PackageNotFoundError:
        pydantic_ai = "unknown"
    return f"shipagent {own} (pydantic-ai {pydantic_ai})"


def print_problems(console: Console, problems: Sequence[Problem]) -> None:
    """One line per problem: ``error:`` in red, ``warning:`` in yellow; its detail indented below."""
    for problem in problems:
        style = "bold red" if problem.level == "error" else "yellow"
        console.print(f"[{style}]{problem.level}:[/] {escape(problem.message)}")
        if problem.detail:
            console.print(f"  [dim]detail: {escape(problem.detail)}[/]")


def preflight(
    err_console: Console, project: Path, chat_key: str, make_agent: Callable[[], ShipAgent]
) -> ShipAgent:
    """What ``shipagent chat`` checks before it shows the prompt; returns the agent to chat with.

    The chat key must be valid and ship.json must load (else exit 2, like every command). Then the
    checks of ``shipagent check`` run, the agent is built and its model too (the agent's own, so
    ``-m`` and test factories count): every problem is printed, warnings let the chat start,
    errors end the command with status 1.

    Raises:
        typer.Exit: 2 for a bad chat key or a ship.json that does not load, 1 when a check failed.
    """
    try:
        validate_chat_key(chat_key)
    except ShipAgentError as exc:
        err_console.print(f"[bold red]error:[/] --chat-key: {escape(str(exc))}")
        raise typer.Exit(2) from None
    root = project.expanduser().resolve()
    try:
        if not root.is_dir():
            raise ConfigError(f"project directory {str(project)!r} does not exist", path=None)
        config = load_config(root)
    except ShipAgentError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    from ._checks import Problem, check_project, has_errors

    problems = check_project(root, config=config, include_model=False)
    agent: ShipAgent | None = None
    try:
        agent = make_agent()
        agent.model  # noqa: B018 — builds the model: no model, unknown provider, missing key
    except ShipAgentError as exc:
        if not any(p.message == str(exc) for p in problems):
            problems.insert(0, Problem("error", str(exc), getattr(exc, "path", None)))
    print_problems(err_console, problems)
    if has_errors(problems) or agent is None:
        err_console.print("[dim]fix these (see `shipagent check`), then start the chat again[/]")
        raise typer.Exit(1)
    return agent


def ensure_gitignore(directory: Path) -> bool:
    """Make ``directory/.gitignore`` ignore ``.ship/`` (created, or the line appended). True if changed."""
    path = directory / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    if any(line.strip() in (".ship", ".ship/", "/.ship", "/.ship/") for line in lines):
        return False
    text = "\n".join([*lines, "# shipagent's chats, logs and context files (per machine)", ".ship/"]) + "\n"
    path.write_text(text, encoding="utf-8")
    return True


def interruptible(run: Callable[[], T], err_console: Console) -> T:
    """Call ``run``; Ctrl-C ends the command with status 130 and one dim line, never a traceback.

    ``run`` has finished its own cleanup by then (the event loop cancelled the chat, and
    ``async with agent`` stopped the MCP servers).
    """
    try:
        return run()
    except KeyboardInterrupt:
        err_console.print("\n[dim]interrupted[/]")
        raise typer.Exit(INTERRUPTED) from None


class _ConsoleLogHandler(logging.Handler):
    """shipagent's warnings as ``warning: …`` lines on stderr (an MCP server that did not start).

    A failed run is not repeated here: the command prints the run's own explanation.
    """

    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "shipagent" and str(record.msg).startswith("run %s failed"):
            return
        try:
            level = "error" if record.levelno >= logging.ERROR else "warning"
            self.console.print(f"[yellow]{level}:[/] {escape(record.getMessage())}")
        except Exception:  # logging must never break the command
            self.handleError(record)


def configure_logging(console: Console) -> None:
    """Route the ``shipagent`` loggers to ``console`` (once per process) instead of Python's bare
    last-resort handler, which prints the internals of a failure a second time."""
    logger = logging.getLogger("shipagent")
    if not any(isinstance(h, _ConsoleLogHandler) for h in logger.handlers):
        logger.addHandler(_ConsoleLogHandler(console))
        logger.propagate = False
