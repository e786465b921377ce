"""The command line and `import shipagent` start without pydantic-ai or the MCP client stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("pydantic_ai", "mcp", "mcp_types", "fastmcp", "openai", "jsonschema")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_import_shipagent_and_the_cli_module_load_nothing_heavy() -> None:
    assert _loaded_after("import shipagent") == []
    assert _loaded_after("import shipagent.hosts.cli._app") == []


def test_help_lists_the_lazy_subcommands_without_loading_them() -> None:
    code = (
        "import contextlib, io\n"
        "from shipagent.hosts.cli._app import app\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    app(['--help'])\n"
        "assert 'mcp' in out.getvalue() and 'context' in out.getvalue(), out.getvalue()"
    )
    assert _loaded_after(code) == []


def test_an_agent_loads_pydantic_ai_but_not_the_mcp_client_stack() -> None:
    loaded = _loaded_after("from shipagent import ShipAgent")
    assert "pydantic_ai" in loaded
    assert not {"fastmcp", "mcp", "mcp_types", "jsonschema"} & set(loaded)


# What a plain agent never needs, by why it would be loaded: rooms the project does not use, the
# command line's sub-apps, YAML (only skills), pydantic-ai's function-model module (only tests).
ROOMS_UNUSED = (
    "dbos",
    "psycopg",
    "starlette",
    "uvicorn",
    "fastmcp",
    "mcp",
    "mcp_types",
    "pydantic_ai.mcp",
    "jsonschema",
    "yaml",
    "pydantic_ai.models.function",
    "shipagent.hosts.serve",
    "shipagent.hosts.durable",
    "shipagent.hosts.cli._files",
    "shipagent.hosts.cli._mcp",
    "shipagent.hosts.cli._ledger",
    "typer",
    "tiktoken",
)

_AGENT_WITHOUT_A_TURN = (
    "import sys\n"
    "from shipagent import ShipAgent\n"
    "agent = ShipAgent.from_project(sys.argv[1])\n"
    "print(' '.join(sorted(sys.modules)))"
)


def _modules_after_agent(project: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _AGENT_WITHOUT_A_TURN, project], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def test_a_plain_agent_loads_no_room_it_does_not_use(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text('{"name": "plain"}')
    loaded = _modules_after_agent(str(tmp_path))
    assert "shipagent.agent._agent" in loaded  # the probe really built an agent
    assert [name for name in ROOMS_UNUSED if name in loaded] == []
