"""Building an agent loads neither tiktoken nor the ledger's CLI: both wait for their first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_BUILD = (
    "import sys\n"
    "from shipagent import ShipAgent\n"
    "agent = ShipAgent.from_project(sys.argv[1])\n"
    "print(' '.join(sorted(sys.modules)))"
)


def test_an_agent_is_built_without_tiktoken_or_the_inspect_cli(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text('{"name": "plain"}')
    out = subprocess.run(
        [sys.executable, "-c", _BUILD, str(tmp_path)], capture_output=True, text=True, check=True
    )
    loaded = set(out.stdout.split())
    assert "shipagent.agent._agent" in loaded
    assert {"tiktoken", "shipagent.hosts.cli._ledger"} & loaded == set()
    # and both still arrive when used
    used = subprocess.run(
        [
            sys.executable,
            "-c",
            "from shipagent.window.tokens import count_tokens\n"
            "from shipagent.hosts.cli._ledger import inspect_command\n"
            "print(count_tokens('hello world'), callable(inspect_command))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert used.stdout.split() == ["2", "True"]
