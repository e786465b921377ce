"""Command-line options every ``shipagent`` subcommand spells the same way.

A module of its own (only typer), so the main CLI and each room's sub-commands share one
definition without importing one another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ProjectOpt"]

ProjectOpt = Annotated[Path, typer.Option("--project", "-C", help="Project directory (holds ship.json).")]
"""``-C DIR``: the project directory; every subcommand defaults it to ``Path(".")``."""
