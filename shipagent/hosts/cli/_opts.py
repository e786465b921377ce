"""Command-line options every ``shipagent`` subcommand spells the same way.

A module of its own (only typer), so the main CLI and each room's sub-commands share one
definition without importing one another.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["ProjectOpt", "err", "fail", "log_to_stderr", "no_project_message", "out", "require_project"]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Say ``error: message`` on stderr; the ``typer.Exit`` (status 2, bad input) to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(2)


def no_project_message(project: Path) -> str | None:
    """Why ``project`` is not a shipagent project (no ``ship.json`` in it), or ``None`` if it is.

    Every command that works on a project says this one sentence, so a user in the wrong
    directory learns it from the first line, not from a missing model three lines later.
    """
    if (project / "ship.json").is_file():
        return None
    shown = project.expanduser().resolve()
    here = shown == Path(os.getcwd()).resolve()
    init = "shipagent init" if here else f"shipagent init {project}"
    missing = "" if shown.is_dir() else " (the directory does not exist)"
    return f"no ship.json in {shown}{missing}: run `{init}` or pass -C DIR"


def require_project(ctx: typer.Context, value: Path) -> Path:
    """The ``-C`` callback: a directory without ship.json ends the command with status 2."""
    if ctx.resilient_parsing:  # shell completion: never exit
        return value
    message = no_project_message(value)
    if message is not None:
        raise fail(message)
    return value


ProjectOpt = Annotated[
    Path,
    typer.Option("--project", "-C", help="Project directory (holds ship.json).", callback=require_project),
]
"""``-C DIR``: the project directory; every subcommand defaults it to ``Path(".")``.

A directory without ``ship.json`` is refused before the command runs (exit 2), by
:func:`require_project`.
"""


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when it writes, not when it was made.

    A long-running command installs it once; a test runner that swaps ``sys.stderr`` around each
    command (and closes its capture afterwards) then never leaves a handler on a closed stream.
    """

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def log_to_stderr() -> None:
    """The ``shipagent`` loggers at INFO on stderr, with times (``serve``, ``worker``, ``channels run``).

    Once per process: a second command in the same process (tests) adds no second handler.
    """
    logger = logging.getLogger("shipagent")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
