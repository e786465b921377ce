"""Pieces of the ``shipagent`` command that are not commands: version, project checks before a
chat, ``.gitignore`` for ``init``, and a clean exit on Ctrl-C.

Kept out of ``cli.py`` so the command table stays readable and other rooms can reuse them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ._checks import Problem, check_project, has_errors
from .chatkeys import validate_chat_key
from .config import ShipConfig
from .errors import ShipAgentError

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
    """One line per problem: ``error:`` in red, ``warning:`` in yellow."""
    for problem in problems:
        style = "bold red" if problem.level == "error" else "yellow"
        console.print(f"[{style}]{problem.level}:[/] {escape(problem.message)}")


def preflight(
    err_console: Console,
    project: Path,
    chat_key: str,
    build_model: Callable[[], object],
    *,
    config: ShipConfig,
) -> None:
    """What ``shipagent chat`` checks before it shows the prompt.

    The chat key must be valid; the project must pass the checks of ``shipagent check`` (the model
    is built through ``build_model`` — the agent's own — so ``-m`` and test factories count).
    Warnings are printed and the chat starts; errors are printed and the command exits 1.

    Raises:
        typer.Exit: 2 for a bad chat key, 1 when a check found an error.
    """
    try:
        validate_chat_key(chat_key)
    except ShipAgentError as exc:
        err_console.print(f"[bold red]error:[/] --chat-key: {escape(str(exc))}")
        raise typer.Exit(2) from None
    problems = check_project(project, config=config, include_model=False)
    try:
        build_model()
    except ShipAgentError as exc:
        problems.insert(0, Problem("error", str(exc), getattr(exc, "path", None)))
    print_problems(err_console, problems)
    if has_errors(problems):
        err_console.print("[dim]fix these in ship.json (see `shipagent check`), then start the chat again[/]")
        raise typer.Exit(1)


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
    """Call ``run``; Ctrl-C ends the command with status 130 and one dim line, never a traceback."""
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
