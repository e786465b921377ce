"""``shipagent check``: the durable settings, validated and connected to.

Registered in ``shipagent.cli.check_hooks``. Prints where the system database is (password
redacted), which executor id a worker started here would take, and the executors the database
knows with the age of their last heartbeat. A database that cannot be reached, or a missing
durable extra, fails the check (exit 1): every turn would fail the same way.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..config import ShipConfig
from ._settings import resolve_settings

__all__ = ["durable_check_hook"]


def durable_check_hook(project: Path, config: ShipConfig, console: Console) -> None:
    """Report ship.json ``durable`` and try the database (no-op when durable mode is off)."""
    durable = config.durable
    if not durable.enabled:
        return
    settings = resolve_settings(durable, project)
    who = settings.executor_id or "<hostname>:<slot> (first free slot under .ship/durable/slots/)"
    console.print(
        f"durable: on — {escape(settings.redacted_url())}, executor {escape(who)}, "
        f"recover after {durable.recover_after_seconds:g}s",
        highlight=False,
    )
    try:
        import dbos  # noqa: F401

        from ._heartbeat import Heartbeats
    except ImportError as exc:
        console.print(
            f"[red]durable: the durable extra is missing ({escape(str(exc))}): "
            "pip install 'shipagent[durable]'[/]"
        )
        raise typer.Exit(1) from None
    beats = Heartbeats(settings)
    try:
        ages = beats.ages()
    except Exception as exc:
        message = str(exc).replace(settings.database_url, settings.redacted_url()).strip().splitlines()
        console.print(
            f"[red]durable: cannot use the database {escape(settings.redacted_url())}: "
            f"{type(exc).__name__}: {escape(message[0] if message else '')}[/]",
            highlight=False,
        )
        raise typer.Exit(1) from None
    finally:
        beats.close()
    console.print("durable: database reachable", highlight=False)
    for executor_id, age in sorted(ages.items()):
        state = "stale" if age > durable.recover_after_seconds else "alive"
        console.print(f"durable executor {escape(executor_id)}: last heartbeat {age:.0f}s ago ({state})")
