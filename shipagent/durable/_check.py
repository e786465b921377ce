"""``shipagent check``: the durable settings, validated and connected to.

Two pieces, so the check command can use them the way it reports everything else:
:func:`durable_problems` returns ``(level, message)`` pairs — an unreachable database or a missing
durable extra is an ``error`` (every turn would fail the same way) — and
:func:`durable_check_hook` prints the state: where the system database is (password redacted),
which executor id a worker started here would take, and the executors the database knows with the
age of their last heartbeat. Registered in ``shipagent.cli.check_hooks``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..config import ShipConfig
from ._settings import resolve_settings

__all__ = ["durable_check_hook", "durable_problems"]


def _probe(project: Path, config: ShipConfig) -> tuple[list[tuple[str, str]], dict[str, float]]:
    settings = resolve_settings(config.durable, project)
    try:
        import dbos  # noqa: F401

        from ._heartbeat import Heartbeats
    except ImportError as exc:
        return [
            (
                "error",
                f"durable: the durable extra is missing ({exc}): pip install -e '.[durable]' in the shipagent checkout",
            )
        ], {}
    beats = Heartbeats(settings)
    try:
        return [], beats.ages()
    except Exception as exc:
        lines = str(exc).replace(settings.database_url, settings.redacted_url()).strip().splitlines()
        message = (
            f"durable: cannot use the database {settings.redacted_url()}: "
            f"{type(exc).__name__}: {lines[0] if lines else ''}"
        )
        return [("error", message)], {}
    finally:
        beats.close()


def durable_problems(project: Path, config: ShipConfig) -> list[tuple[str, str]]:
    """What would make a durable turn fail: ``(level, message)`` pairs (none when durable is off)."""
    if not config.durable.enabled:
        return []
    return _probe(project, config)[0]


def durable_check_hook(project: Path, config: ShipConfig, console: Console) -> None:
    """Print ship.json ``durable`` and the database's executors (no-op when durable mode is off).

    On a check command without a problem list of its own, a problem is printed here and exits 1.
    """
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
    problems, ages = _probe(project, config)
    for _level, message in problems:
        console.print(f"[red]{escape(message)}[/]", highlight=False)
    if problems:
        raise typer.Exit(1)
    console.print("durable: database reachable", highlight=False)
    for executor_id, age in sorted(ages.items()):
        state = "stale" if age > durable.recover_after_seconds else "alive"
        console.print(f"durable executor {escape(executor_id)}: last heartbeat {age:.0f}s ago ({state})")
