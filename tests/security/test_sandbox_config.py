"""The new ``permissions.execShell`` keys: bad values are refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent.config import ExecShellPermission, load_config
from shipagent.errors import ConfigError


def _load(tmp_path: Path, shell: dict[str, object]) -> ExecShellPermission:
    (tmp_path / "ship.json").write_text(json.dumps({"permissions": {"execShell": shell}}), encoding="utf-8")
    return load_config(tmp_path).permissions.exec_shell


def test_defaults_bound_every_command(tmp_path: Path) -> None:
    policy = _load(tmp_path, {})
    assert (policy.max_output_bytes, policy.max_processes, policy.max_file_bytes) == (32 << 20, 1024, 1 << 30)
    assert policy.env == [] and policy.hide == []


@pytest.mark.parametrize(
    ("shell", "key"),
    [
        ({"env": ["NOT A NAME"]}, "permissions.execShell.env"),
        ({"env": ["=value"]}, "permissions.execShell.env"),
        ({"maxOutputBytes": 10}, "permissions.execShell.maxOutputBytes"),
        ({"maxProcesses": 1}, "permissions.execShell.maxProcesses"),
        ({"maxFileBytes": 0}, "permissions.execShell.maxFileBytes"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, shell: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, shell)
    assert key in str(caught.value)


def test_env_takes_names_and_fixed_values(tmp_path: Path) -> None:
    policy = _load(tmp_path, {"env": ["CARGO_HOME", "CI=true", "EMPTY="]})
    assert policy.env == ["CARGO_HOME", "CI=true", "EMPTY="]
