"""``shipagent context list|export|import``: a chat's context files from the command line.

A typer sub-app mounted by ``shipagent.hosts.cli._app``. It validates the project like every other command
(ship.json must load) and works on the same store as ``ShipAgent.context_files``, without building
an agent or needing a model — so this package never imports the agent, which imports it.
Mistakes print one ``error:`` line and exit with status 2, like the rest of the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..._lock import ProjectLock
from ...config import load_config
from ...errors import ConfigError, ProjectLockedError, ShipAgentError
from ...store.files._ref import CONTEXT_KINDS
from ...store.files._store import ContextFiles
from ._opts import ProjectOpt, err, fail, out

__all__ = ["context_app"]

context_app = typer.Typer(
    name="context",
    help="List, export and import a chat's context files (spilled outputs, compacted history, catalog).",
    no_args_is_help=True,
)

KeyArg = Annotated[str, typer.Argument(help="The chat key (telegram:chat:42).")]


def _files(project: Path) -> ContextFiles:
    root = project.expanduser().resolve()
    try:
        if not root.is_dir():
            raise ConfigError(f"project directory {str(project)!r} does not exist", path=None)
        config = load_config(root)  # a broken ship.json is reported here, as by every command
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    from ...store._select import open_stores  # a durable cluster's are in its database

    return open_stores(root, config).sync_context_files()


@context_app.command("list")
def list_(
    chat_key: KeyArg,
    project: ProjectOpt = Path("."),
    kind: Annotated[str | None, typer.Option(help="artifact, history or catalog.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print the refs as JSON.")] = False,
) -> None:
    """List a chat's context files, newest first."""
    if kind is not None and kind not in CONTEXT_KINDS:
        raise fail(f"--kind must be one of {', '.join(CONTEXT_KINDS)}; got {kind!r}")
    files = _files(project)
    try:
        refs = files.list(chat_key, kind=kind, limit=limit)  # type: ignore[arg-type]
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    if as_json:
        out.print_json(json.dumps([r.to_json() for r in refs], ensure_ascii=False))
        return
    if not refs:
        out.print(f"no context files for {escape(chat_key)}")
        return
    table = Table("id", "kind", "bytes", "created", "source", "name")
    for ref in refs:
        table.add_row(ref.id, ref.kind, f"{ref.size_bytes:,}", ref.created_at, ref.source, escape(ref.name))
    out.print(table)


@context_app.command("export")
def export(
    chat_key: KeyArg,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    project: ProjectOpt = Path("."),
) -> None:
    """Export a chat's eager context files as one JSON document."""
    files = _files(project)
    try:
        data = files.export(chat_key)
    except ShipAgentError as exc:
        raise fail(str(exc)) from None
    text = json.dumps(data, ensure_ascii=False)
    if output is None:
        typer.echo(text)
        return
    output.write_text(text + "\n", encoding="utf-8")
    err.print(f"exported {len(data['items'])} context files of {escape(chat_key)} to {escape(str(output))}")


@context_app.command("import")
def import_(
    chat_key: KeyArg,
    file: Annotated[Path, typer.Argument(help="A file written by `shipagent context export`.")],
    project: ProjectOpt = Path("."),
) -> None:
    """Import context files into a chat; a malformed or hostile export is refused whole."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise fail(f"{file}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise fail(f"{file}: not a JSON export ({exc})") from None
    files = _files(project)
    try:
        with ProjectLock(files.paths.project_root).hold():  # a writer: one process at a time
            refs = files.import_(chat_key, data)
    except ProjectLockedError as exc:
        raise fail(str(exc)) from None
    except ShipAgentError as exc:
        raise fail(f"{file}: {exc}") from None
    out.print(f"imported {len(refs)} context files into {escape(chat_key)}")
