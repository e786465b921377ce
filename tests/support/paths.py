"""Where things are, for tests that read the repository's own files or run scripts by path.

Computed once here so a test file can move between folders without its paths breaking.
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
"""The ``tests/`` folder."""
ROOT = TESTS.parent
"""The repository: ``shipagent/``, ``docs/``, ``examples/``, ``skills/``, ``README.md``."""
FIXTURES = TESTS / "fixtures"
"""Committed data: ``.ship/`` folders and ledgers written by earlier releases."""
MCP_SERVERS = TESTS / "support" / "mcp_servers"
"""MCP server scripts the tests start as subprocesses."""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH``, plus ``extra``.

    For subprocesses that import ``tests.support…`` (worker model factories, scripts run with
    ``python -c``): pytest puts the repository on this process's ``sys.path``, not on a child's.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env
