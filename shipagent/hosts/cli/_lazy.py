"""Sub-commands of ``shipagent`` that are imported only when they run.

``shipagent mcp``, ``context``, ``inspect``, ``serve``, ``worker`` and ``recover`` live in their
rooms (``shipagent/mcp/_cli.py``, ``shipagent/files/_cli.py``, ``shipagent/ledger/_cli.py``, …),
whose packages import pydantic-ai, uvicorn, DBOS and more. Registering them with ``add_typer`` or
``command`` would make ``shipagent --help`` pay for all of it (seconds on a small machine). The
top-level group below lists them from a static name and help line, and imports a sub-app or a
command function the moment it is asked to run (or to show its own help).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup

__all__ = ["LazyGroup", "lazy_subcommand"]


def _no_placeholders(command: Any, ctx: Any) -> None:
    """Drop the ``<bool>`` typer's rich help prints after every flag, in ``command`` and below it.

    typer renders a parameter's type next to its name, and a flag's type is ``bool``; but a
    flag takes no value, so ``--json <bool>`` reads as if it wanted one. An empty metavar is
    click's own way to show no placeholder. ``get_params`` also creates the help option, so
    ``--help`` loses its placeholder too.
    """
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _no_placeholders(sub, ctx)


class LazyGroup(TyperGroup):
    """A typer group whose registered lazy sub-apps load on first real use.

    While the group formats its own help it lists a lazy sub-app by a stand-in carrying the
    help line, so nothing is imported; any other lookup (running it, completing it, its help)
    imports the module and caches the real command.
    """

    lazy: ClassVar[dict[str, tuple[str, str, str]]] = {}
    """``name -> (module, attribute holding the typer app or command function, one-line help)``."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return [*names, *(name for name in self.lazy if name not in names)]

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for param in params:  # this group's own flags (--version, --help): see _no_placeholders
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self._get_command(ctx, cmd_name)
        if command is not None and not self._listing:
            _no_placeholders(command, ctx)
        return command

    def _get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        spec = self.lazy.get(cmd_name)
        if command is not None or spec is None:
            return command
        module, attribute, help_line = spec
        if self._listing:
            return TyperGroup(name=cmd_name, help=help_line)
        target = getattr(importlib.import_module(module), attribute)
        if isinstance(target, typer.Typer):
            command = typer.main.get_group(target)
        else:  # a command function, as ``app.command(name)(function)`` would register it
            # no --install-completion/--show-completion here: no other command has them either
            single = typer.Typer(add_completion=False)
            single.command(cmd_name)(target)
            command = typer.main.get_command(single)
        command.name = cmd_name
        self.add_command(command, cmd_name)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def lazy_subcommand(name: str, module: str, attribute: str, help_line: str) -> None:
    """Register ``shipagent <name>``: the typer app or command ``module.attribute``, imported when used."""
    LazyGroup.lazy[name] = (module, attribute, help_line)
