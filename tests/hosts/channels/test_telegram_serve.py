"""`shipagent serve` runs the channels ship.json enables beside the HTTP API, and /healthz reports them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.hosts.serve import create_app
from tests.hosts.channels._support import ship_json
from tests.support.core import make_project
from tests.support.serve import serving
from tests.support.stream import StreamScript
from tests.support.telegram_server import TOKEN, telegram_server

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``serving(app)`` entered and left in a worker thread: the local Telegram server lives on this
    loop, and the app's start-up talks to it (a blocking wait here would starve it)."""
    cm = serving(app)
    url = await anyio.to_thread.run_sync(cm.__enter__)
    try:
        yield url
    finally:
        await anyio.to_thread.run_sync(cm.__exit__, None, None, None)


async def _health(url: str) -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        data: dict[str, object] = (await client.get(f"{url}/healthz")).json()
        return data


async def test_serve_answers_on_telegram_and_over_http_and_health_reports_the_channel(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with served(create_app(agent)) as url:
            await fake.wait_for(lambda: fake.called("getUpdates"))
            fake.user_message("hello there")
            await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
            health = await _health(url)
            channels = health["channels"]
            assert isinstance(channels, dict)
            telegram = channels["telegram"]
            assert telegram["connected"] is True and telegram["lastInboundAt"] is not None
            assert telegram["stopped"] is False and telegram["backlog"] == 0
            assert TOKEN not in json.dumps(health)  # health never shows the token
            async with httpx.AsyncClient(timeout=30) as client:  # the HTTP API beside it
                reply = await client.post(f"{url}/v1/chats/api:1/messages", json={"text": "over http"})
            assert reply.status_code == 200 and reply.json()["output"] == "echo: over http"
        polls = len(fake.called("getUpdates"))
        await anyio.sleep(0.5)
        assert len(fake.called("getUpdates")) == polls  # the channel stopped with the server


async def test_channels_false_serves_http_only(tmp_path: Path) -> None:
    async with telegram_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with served(create_app(agent, channels=False)) as url:
            health = await _health(url)
        assert "channels" not in health and not fake.called("getUpdates")


def test_serve_no_http_without_a_channel_says_what_to_enable(tmp_path: Path) -> None:
    from shipagent.hosts.cli._app import app

    root = make_project(tmp_path / "p", {})
    done = CliRunner().invoke(app, ["serve", "--no-http", "-C", str(root), "-m", "test"])
    assert done.exit_code == 2
    assert "channels.telegram.enabled" in done.output
