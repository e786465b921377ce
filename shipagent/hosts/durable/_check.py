"""``shipagent check``: the durable settings, validated and connected to.

Two pieces, so the check command can use them the way it reports everything else:
:func:`durable_problems` returns ``(level, message)`` pairs — an unreachable database or a missing
durable extra is an ``error`` (every turn would fail the same way) — and
:func:`durable_check_hook` prints the state: where the system database is (password redacted),
which executor id a worker started here would claim (asked of the database, as a worker would),
and the executors the database knows with the age of their last heartbeat. Registered in ``shipagent.hosts.cli._app.check_hooks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ...config import ShipConfig
from ._settings import resolve_settings

__all__ = ["durable_check_hook", "durable_problems"]

_RELEASED = 1e8
"""A heartbeat this old is a worker's clean stop (its row is set to the epoch)."""


@dataclass
class _Probe:
    problems: list[tuple[str, str]] = field(default_factory=list)
    rows: list[Any] = field(default_factory=list)
    executor_id: str = ""
    note: str = ""


def _probe(project: Path, config: ShipConfig) -> _Probe:
    settings = resolve_settings(config.durable, project)
    try:
        import dbos  # noqa: F401

        from ._heartbeat import Heartbeats, preview_executor_id, this_process
    except ImportError as exc:
        return _Probe(
            [
                (
                    "error",
                    f"durable: the durable extra is missing ({exc}): "
                    "pip install -e '.[durable]' in the shipagent checkout",
                )
            ]
        )
    beats = Heartbeats(settings)
    try:
        executor_id, note = preview_executor_id(beats, settings, this_process())
        return _Probe(rows=beats.rows(), executor_id=executor_id, note=note)
    except Exception as exc:
        lines = str(exc).replace(settings.database_url, settings.redacted_url()).strip().splitlines()
        message = (
            f"durable: cannot use the database {settings.redacted_url()}: "
            f"{type(exc).__name__}: {lines[0] if lines else ''}"
        )
        return _Probe([("error", message)])
    finally:
        beats.close()


def durable_problems(project: Path, config: ShipConfig) -> list[tuple[str, str]]:
    """What would make a durable turn fail: ``(level, message)`` pairs (none when durable is off)."""
    if not config.durable.enabled:
        return []
    return _probe(project, config).problems


def durable_check_hook(project: Path, config: ShipConfig, console: Console) -> None:
    """Print ship.json ``durable`` and the database's executors (no-op when durable mode is off).

    The executor id is the one a worker started here now would claim (the database decides:
    the first ``<hostname>:<n>`` no live worker holds, or the configured id). On a check command
    without a problem list of its own, a problem is printed here and exits 1.
    """
    durable = config.durable
    if not durable.enabled:
        return
    settings = resolve_settings(durable, project)
    console.print(
        f"durable: on — {escape(settings.redacted_url())}, recover after {durable.recover_after_seconds:g}s",
        highlight=False,
    )
    probe = _probe(project, config)
    for _level, message in probe.problems:
        console.print(f"[red]{escape(message)}[/]", highlight=False)
    if probe.problems:
        raise typer.Exit(1)
    console.print("durable: database reachable", highlight=False)
    how = "configured" if settings.executor_id else "first free <hostname>:<n>"
    line = f"durable: a worker started here would be executor {escape(probe.executor_id)} ({how})"
    if probe.note:
        line += f" [yellow]— {escape(probe.note)}[/]"
    console.print(line, highlight=False)
    for row in probe.rows:
        state = "dead" if row.dead(durable.recover_after_seconds) else "alive"
        beat = "stopped" if row.age > _RELEASED else f"last heartbeat {max(row.age, 0):.0f}s ago"
        console.print(
            f"durable executor {escape(row.executor_id)}: pid {row.pid} on {escape(row.host or '?')}, "
            f"{beat} ({state})",
            highlight=False,
        )
