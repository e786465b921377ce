"""``shipagent check`` asks the Bot API who the bot is, and never prints the token."""

from __future__ import annotations

import json
from pathlib import Path

import anyio.to_thread
import pytest
from typer.testing import CliRunner

from shipagent.hosts.cli._app import app
from tests.hosts.channels._support import ship_json
from tests.support.telegram_server import TOKEN, telegram_server

pytestmark = pytest.mark.anyio


async def test_check_names_the_bot_and_its_access_rules(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        (tmp_path / "ship.json").write_text(
            json.dumps(ship_json(fake, groups={"allow": [-1]})), encoding="utf-8"
        )
        result = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)])
        )
    assert "telegram: @ship_bot (id 123456)" in result.output
    assert "1 allowed group(s), mention needed" in result.output
    assert fake.called("getMe") and TOKEN not in result.output


async def test_check_fails_on_a_refused_token_without_printing_it(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        ship = ship_json(fake)
        ship["channels"]["telegram"]["botToken"] = "999:wrong-token"
        (tmp_path / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
        result = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)])
        )
    assert result.exit_code == 1
    assert "did not accept channels.telegram.botToken" in result.output
    assert "wrong-token" not in result.output
