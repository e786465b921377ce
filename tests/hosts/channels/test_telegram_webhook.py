"""Webhook mode end to end: the local Bot API server keeps the webhook, updates are POSTed to the
channel's own listener over HTTP (as Telegram does), the model is scripted."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.chatkeys import ShipPaths
from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.hosts.channels import ChannelHost, channels_from_config
from tests.hosts.channels._support import running, ship_json
from tests.support.channel_process import HOLD, held_project, reply_recorded
from tests.support.core import make_project
from tests.support.net import free_port
from tests.support.stream import StreamScript
from tests.support.telegram_server import TOKEN, FakeTelegram, telegram_server

pytestmark = pytest.mark.anyio

SECRET = "webhook-Secret_0123456789"
PATH = "/tg/updates"


def webhook_json(fake: FakeTelegram, port: int, **more: Any) -> dict[str, Any]:
    """ship.json for webhook mode: the listener on ``port``, the URL Telegram posts to right there."""
    return ship_json(
        fake,
        mode="webhook",
        webhookUrl=f"http://127.0.0.1:{port}{PATH}",
        secretToken=SECRET,
        webhookListen=f"127.0.0.1:{port}",
        **more,
    )


@asynccontextmanager
async def on_webhook(
    root: Path, fake: FakeTelegram, model: Any, *, check: float = 60.0
) -> AsyncIterator[tuple[ShipAgent, ChannelHost]]:
    """The project at ``root`` on Telegram in webhook mode (ship.json written on first use)."""
    if not (root / "ship.json").exists():
        make_project(root, webhook_json(fake, free_port()))
    agent = ShipAgent.from_project(root, model=model)
    channels = channels_from_config(
        agent, agent.config.channels, edit_interval=0.05, webhook_check_interval=check
    )
    async with agent, ChannelHost(agent, channels) as host:
        yield agent, host


def answers(fake: FakeTelegram) -> list[str]:
    return [m.text for m in fake.shown()]


async def test_a_direct_message_posted_to_the_webhook_is_answered_and_healthz_reports_it(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    async with telegram_server() as fake, on_webhook(tmp_path / "p", fake, script.model) as (agent, host):
        hook = fake.webhook
        assert hook is not None and hook["url"].endswith(PATH) and hook["secret_token"] == SECRET
        assert hook["allowed_updates"] == ["message", "callback_query"]
        assert hook["drop_pending_updates"] is False  # what arrived while nobody listened is kept
        assert not fake.called("deleteWebhook") and not fake.called("getUpdates")
        assert fake.called("setMyCommands")

        assert await fake.deliver(fake.user_message("hello there")) == 200
        await fake.wait_for(lambda: answers(fake) == ["echo: hello there"])
        await fake.wait_for(lambda: host.health["telegram"].backlog == 0)  # the turn wound up
        health = host.health_json()["telegram"]
        assert health["connected"] and health["lastInboundAt"] is not None
        assert health["lastError"] is None
    assert agent.paths.transcript("telegram:chat:42").exists()
    assert fake.webhook is not None  # left set on stop: Telegram keeps what arrives meanwhile


async def test_a_wrong_or_missing_secret_is_refused_and_nothing_reaches_the_model(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake, on_webhook(tmp_path / "p", fake, script.model):
        assert fake.webhook is not None
        url = fake.webhook["url"]
        update = fake.user_message("let me in")
        assert await fake.deliver(update, secret="not-the-secret") == 403
        async with httpx.AsyncClient(timeout=20) as client:
            assert (await client.post(url, json=update)).status_code == 403  # no header at all
            right = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
            big = {"update_id": 99, "pad": "x" * (2 * 1024 * 1024)}
            assert (await client.post(url, json=big, headers=right)).status_code == 413
            assert (await client.post(url, content=b"not json", headers=right)).status_code == 400
            assert (await client.post(url, json=[1, 2], headers=right)).status_code == 400
            assert (await client.get(url, headers=right)).status_code == 405
            assert (await client.post(url + "x", json=update, headers=right)).status_code == 404
        await anyio.sleep(0.2)
        assert script.requests == [] and answers(fake) == []
        # refused means not recorded either: the same update with the secret is answered
        assert await fake.deliver(update) == 200
        await fake.wait_for(lambda: answers(fake) == ["echo: let me in"])
    assert len(script.requests) == 1


async def test_the_same_update_delivered_twice_is_answered_once_even_across_a_restart(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    root = tmp_path / "p"
    async with telegram_server() as fake:
        first = fake.user_message("first")
        async with on_webhook(root, fake, script.model):
            assert await fake.deliver(first) == 200
            assert await fake.deliver(first) == 200  # a redelivery: confirmed, not answered again
            await fake.wait_for(lambda: answers(fake) == ["echo: first"])
        # the 200 was lost (a crash after the record): Telegram delivers it to the next process
        async with on_webhook(root, fake, script.model):
            assert await fake.deliver(first) == 200
            second = fake.user_message("second")
            statuses = await _concurrently(fake, [second, second])
            assert statuses == [200, 200]
            await fake.wait_for(lambda: answers(fake) == ["echo: first", "echo: second"])
            await anyio.sleep(0.2)
    assert answers(fake) == ["echo: first", "echo: second"]
    assert len(script.requests) == 2


async def _concurrently(fake: FakeTelegram, updates: list[dict[str, Any]]) -> list[int]:
    statuses = [0] * len(updates)

    async def one(i: int) -> None:
        statuses[i] = await fake.deliver(updates[i])

    async with anyio.create_task_group() as tasks:
        for i in range(len(updates)):
            tasks.start_soon(one, i)
    return statuses


async def test_an_update_that_cannot_be_recorded_gets_a_500_and_is_answered_when_delivered_again(
    tmp_path: Path,
) -> None:
    script = StreamScript()
    async with telegram_server() as fake, on_webhook(tmp_path / "p", fake, script.model) as (agent, host):
        seen = agent.paths.ship_dir / "channels" / "telegram-seen.jsonl"
        seen.unlink(missing_ok=True)
        seen.mkdir(parents=True)  # the dedupe record cannot be written (as a full or broken disk)
        update = fake.user_message("are you there")
        assert await fake.deliver(update) == 500  # Telegram keeps it and delivers it again
        health = host.health_json()["telegram"]
        assert not health["connected"] and "not accepted" in health["lastError"]
        await anyio.sleep(0.2)
        assert script.requests == []
        seen.rmdir()
        assert await fake.deliver(update) == 200
        await fake.wait_for(lambda: answers(fake) == ["echo: are you there"])
        assert host.health_json()["telegram"]["connected"]
        recorded = [json.loads(line) for line in seen.read_text().splitlines()]
        accepted = [r["message"] for r in recorded if not r.get("done") and "reply" not in r]
        assert accepted == [str(update["message"]["message_id"])]  # once (its answer's message id aside)


async def test_the_webhook_check_reports_a_webhook_taken_over_or_failing(tmp_path: Path) -> None:
    script = StreamScript()
    async with (
        telegram_server() as fake,
        on_webhook(tmp_path / "p", fake, script.model, check=0.05) as (_, host),
    ):
        telegram = host.health["telegram"]
        fake.webhook_error = (2_000_000_000, "Wrong response from the webhook: 502 Bad Gateway")
        await fake.wait_for(lambda: not telegram.connected)
        assert telegram.last_error is not None and "502 Bad Gateway" in telegram.last_error
        fake.webhook_error = None
        assert fake.webhook is not None
        saved = dict(fake.webhook)
        fake.webhook = None  # another process deleted it (or set its own)
        await fake.wait_for(lambda: "removed" in (telegram.last_error or ""))
        assert not telegram.connected
        fake.webhook = saved
        await fake.wait_for(lambda: telegram.connected)


async def test_a_listen_address_in_use_fails_the_start_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with telegram_server() as fake:
            root = make_project(tmp_path / "p", webhook_json(fake, port))
            with pytest.raises(OSError, match=r"channels\.telegram\.webhookListen"):
                async with on_webhook(root, fake, StreamScript().model):
                    pass
            assert fake.webhook is None  # never pointed Telegram at a listener that is not there


def test_webhook_mode_is_validated_like_every_other_key() -> None:
    base = {"enabled": True, "botToken": "1:x", "mode": "webhook", "webhookUrl": "https://bot.example.com/tg"}

    def parse(**telegram: Any) -> Any:
        return parse_config({"channels": {"telegram": telegram}}).channels.telegram

    with pytest.raises(ConfigError, match=r"channels\.telegram\.secretToken is required"):
        parse(**base)
    with pytest.raises(ConfigError, match=r"channels\.telegram\.webhookUrl is required"):
        parse(**{**base, "webhookUrl": None, "secretToken": "abc"})
    with pytest.raises(ConfigError, match=r"unknown key 'channels\.telegram\.webhookUrls'.*'webhookUrl'"):
        parse(**base, webhookUrls="https://x.org")
    with pytest.raises(ConfigError, match=r"channels\.telegram\.secretToken.*A-Z") as bad:
        parse(**base, secretToken="has spaces and ünïcode")
    assert "spaces" not in str(bad.value)  # the secret is never echoed
    with pytest.raises(ConfigError, match=r"channels\.telegram\.webhookListen.*host:port"):
        parse(**base, secretToken="abc", webhookListen="8443")
    with pytest.raises(ConfigError, match=r"webhookUrl must be https://"):
        parse(**{**base, "webhookUrl": "http://bot.example.com/tg"}, secretToken="abc")
    with pytest.raises(ConfigError, match=r"webhookUrl is set but channels\.telegram\.mode is \"polling\""):
        parse(**{**base, "mode": "polling"})
    config = parse_config(
        {"channels": {"telegram": {**base, "secretToken": "${HOOK_SECRET}"}}}, env={"HOOK_SECRET": "abc_-1"}
    ).channels.telegram
    assert config.secret_token == "abc_-1" and "abc_-1" not in repr(config)
    assert config.webhook_path == "/tg" and config.webhook_listen == "127.0.0.1:8443"


async def test_check_says_whether_the_webhook_is_set_here_without_printing_secrets(tmp_path: Path) -> None:
    from shipagent.hosts.cli._app import app

    async with telegram_server() as fake:
        make_project(tmp_path, webhook_json(fake, free_port()))

        def check() -> str:
            return CliRunner().invoke(app, ["check", "--offline", "-C", str(tmp_path)]).output

        before = await anyio.to_thread.run_sync(check)
        assert "@ship_bot" in before and "webhook not set yet" in before
        async with on_webhook(tmp_path, fake, StreamScript().model):
            fake.webhook_error = (2_000_000_000, "Connection refused")
            running = await anyio.to_thread.run_sync(check)
    assert "webhook set to webhookUrl" in running and "Connection refused" in running
    assert SECRET not in before + running and TOKEN not in before + running


async def test_polling_mode_removes_a_webhook_left_set_and_then_polls(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake:
        fake.webhook = {"url": "https://old.example.com/tg", "secret_token": "old"}  # left by webhook mode
        async with running(tmp_path / "p", fake, script.model):
            assert fake.called("deleteWebhook") and fake.webhook is None
            fake.user_message("polled again")
            await fake.wait_for(lambda: answers(fake) == ["echo: polled again"])
        assert not fake.called("setWebhook")


async def test_killed_mid_answer_in_webhook_mode_the_update_is_answered_exactly_once(tmp_path: Path) -> None:
    root, log = held_project(tmp_path)  # the answer stops after its first word until the restart

    def start() -> subprocess.Popen[bytes]:
        command = [sys.executable, "-c", "from shipagent.hosts.cli._app import main; main()"]
        command += ["channels", "run", "-C", str(root), "--model-factory", "scripted_model:build"]
        with open(log, "ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def finished(fake: FakeTelegram) -> list[str]:
        return [text for text in answers(fake) if text.strip().endswith("and more")]

    async with telegram_server() as fake:
        make_project(root, webhook_json(fake, free_port()))
        process = start()
        try:
            await fake.wait_for(lambda: fake.webhook is not None, within=60)
            update = fake.user_message("please")
            assert await fake.deliver(update) == 200
            await fake.wait_for(lambda: fake.shown(), within=60)  # the answer has begun streaming
            await fake.wait_for(lambda: reply_recorded(root, "telegram"), within=60)
            process.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(lambda: process.wait(30))
            (partial,) = fake.shown()
            assert partial.text.strip() == "done:"
            (root / HOLD).unlink()

            process = start()
            await fake.wait_for(lambda: len(fake.called("setWebhook")) == 2, within=60)
            assert await fake.deliver(update) == 200  # delivered again (Telegram missed the 200)
            await fake.wait_for(lambda: finished(fake), within=60)
            await anyio.sleep(0.5)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(lambda: process.wait(30))
    assert len(finished(fake)) == 1, log.read_text()
    (answer,) = fake.shown()  # one message in the chat: the half-written one became the answer
    assert answer.message_id == partial.message_id and answer.text.startswith("done: please")
    transcript = ShipPaths(root).transcript("telegram:chat:42").read_text(encoding="utf-8")
    users = [row for row in map(json.loads, transcript.splitlines()) if row.get("role") == "user"]
    assert len(users) == 1  # the killed turn left nothing; the replayed one is the only one
