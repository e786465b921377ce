"""A platform enabled in ship.json without its extra installed is one line naming the platform and
the ``pip install`` that fixes it, from ``shipagent check`` and ``shipagent channels run`` alike,
not a ``ModuleNotFoundError`` traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipagent.hosts.cli._app import app
from tests.support.channel_process import MODEL_MODULE, SHIPAGENT

ENABLED: dict[str, dict[str, Any]] = {
    "telegram": {"botToken": "123:abc"},
    "slack": {"botToken": "xoxb-1", "appToken": "xapp-1"},
    "discord": {"botToken": "MTA.x.y"},
    "feishu": {"appId": "cli_a1b2c3", "appSecret": "s"},
    "qq": {"appId": "102012345", "clientSecret": "s"},
}
LIBRARY = {  # the module each extra brings, and its distribution's name
    "telegram": ("telegram", "python-telegram-bot"),
    "slack": ("slack_sdk", "slack-sdk"),
    "discord": ("discord", "discord.py"),
    "feishu": ("lark_oapi", "lark-oapi"),
    "qq": ("websockets", "websockets"),
}
NAME = {"telegram": "Telegram", "slack": "Slack", "discord": "Discord", "feishu": "Feishu", "qq": "QQ"}


def _project(root: Path, platform: str) -> Path:
    channel = {"enabled": True, **ENABLED[platform]}
    (root / "ship.json").write_text(json.dumps({"channels": {platform: channel}}), encoding="utf-8")
    return root


@pytest.mark.parametrize("platform", ENABLED)
def test_check_names_the_platform_and_the_extra_to_install(
    platform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, library = LIBRARY[platform]
    monkeypatch.setitem(sys.modules, module, None)  # what `import module` sees when it is not installed
    result = CliRunner().invoke(app, ["check", "--offline", "-C", str(_project(tmp_path, platform))])
    assert result.exit_code == 1, result.output
    line = (
        f"channels.{platform}.enabled is true, but the {NAME[platform]} channel needs {library}, "
        f"which is not installed: pip install 'shipagent[{platform}]'"
    )
    assert line in result.output.splitlines()
    assert isinstance(result.exception, SystemExit)  # no traceback, no ModuleNotFoundError


def test_channels_run_names_the_platform_and_the_extra_when_its_library_fails_to_import(
    tmp_path: Path,
) -> None:
    """A real process whose ``slack_sdk`` (first on ``sys.path``) raises ``ImportError`` on import."""
    broken = tmp_path / "site" / "slack_sdk"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("this slack_sdk is broken")\n', encoding="utf-8")
    root = _project(tmp_path, "slack")
    (root / "scripted_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(broken.parent), *sys.path])
    done = subprocess.run(
        [SHIPAGENT, "channels", "run", "-C", str(root), "--model-factory", "scripted_model:build"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: channels.slack.enabled is true, but the Slack channel needs slack-sdk, which could "
        "not be imported: pip install 'shipagent[slack]'\n"
    )


def test_serve_names_the_platform_and_the_extra_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, library = LIBRARY["discord"]
    monkeypatch.setitem(sys.modules, module, None)
    project = str(_project(tmp_path, "discord"))
    result = CliRunner().invoke(app, ["serve", "-C", project, "-m", "test", "--port", "1"])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), result.output
    assert f"needs {library}, which is not installed: pip install 'shipagent[discord]'" in result.output
    assert "Traceback" not in result.output and "serving" not in result.output
