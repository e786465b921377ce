"""A ship.json nested absurdly deep is a ConfigError (one ``error:`` line, exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shipagent.config import load_config
from shipagent.errors import ConfigError

SHIPAGENT = str(Path(sys.executable).with_name("shipagent"))


def nested(depth: int, leaf: str = '"${HOME}"') -> str:
    return '{"tools": {"x": ' + "[" * depth + leaf + "]" * depth + "}}"


@pytest.mark.parametrize("depth", [100_000, 2_000, 600, 65])
def test_deep_nesting_is_a_config_error(tmp_path: Path, depth: int) -> None:
    (tmp_path / "ship.json").write_text(nested(depth), encoding="utf-8")
    with pytest.raises(ConfigError, match="nested") as info:
        load_config(tmp_path)
    assert "ship.json" in str(info.value)


def test_check_prints_one_error_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_text(nested(100_000), encoding="utf-8")
    proc = subprocess.run(
        [SHIPAGENT, "check", "-C", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ship.json: nested"), proc.stderr


def test_ordinary_nesting_still_loads(tmp_path: Path) -> None:
    ship = '{"mcp": {"servers": {"t": {"command": "echo", "args": ["${HOME}"], "env": {"A": "b"}}}}}'
    (tmp_path / "ship.json").write_text(ship, encoding="utf-8")
    assert load_config(tmp_path).mcp.servers["t"].args  # type: ignore[union-attr]
