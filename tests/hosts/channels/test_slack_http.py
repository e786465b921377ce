"""The Slack channel in HTTP mode: Slack's Events API requests, signed, posted to the channel's listener.

The incoming side is real HTTP (httpx) with the signature computed here from the signing secret,
as Slack computes it; the outgoing side is slack-sdk's Web API client against the local Slack
server. The channel's clock is a fixed time, and every request is signed for that time (or, to be
refused, for five minutes and a second before it): nothing reads the wall clock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from typer.testing import CliRunner

from shipagent import ShipAgent
from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.hosts.channels import ChannelHost
from shipagent.hosts.channels.slack import SlackChannel
from shipagent.hosts.channels.slack._http import EventsListener
from shipagent.hosts.cli._app import app
from tests.support.channels.slack_driver import NOW, SIGNING_SECRET, signed
from tests.support.core import last_user_text, make_project
from tests.support.net import free_port
from tests.support.slack_server import BOT_TOKEN, TEAM, BotMessage, Envelope, FakeSlack, slack_server
from tests.support.stream import StreamScript

pytestmark = pytest.mark.anyio

SECRET = SIGNING_SECRET
STALE = NOW - 5 * 60 - 1  # a second past the five minutes a signature is good for


class Poster:
    """Slack's side of the Events API: each request signed and POSTed to the channel's Request URL."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url

    async def post(
        self,
        body: bytes,
        content_type: str,
        *,
        timestamp: int = NOW,
        secret: str = SECRET,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        sent = {"Content-Type": content_type, **signed(body, timestamp=timestamp, secret=secret)}
        return await self.client.post(self.url, content=body, headers={**sent, **(headers or {})})

    async def event(self, envelope: Envelope, **kwargs: Any) -> httpx.Response:
        """The Events API request of an ``events_api`` envelope (its payload is the JSON body)."""
        return await self.post(json.dumps(envelope.payload).encode(), "application/json", **kwargs)

    async def events(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            answer = await self.event(envelope)
            assert answer.status_code == 200 and answer.content == b""

    async def form(self, fields: dict[str, str], **kwargs: Any) -> httpx.Response:
        """A form-encoded request: interactivity (``payload=``) or a slash command."""
        body = httpx.QueryParams(fields).__str__().encode()
        return await self.post(body, "application/x-www-form-urlencoded", **kwargs)

    async def click(self, envelope: Envelope) -> httpx.Response:
        """The interactivity request of a ``block_actions`` envelope: ``payload=`` its JSON."""
        return await self.form({"payload": json.dumps(envelope.payload)})


def ship_json(fake: FakeSlack, port: int, **slack: Any) -> dict[str, Any]:
    return {
        "channels": {
            "slack": {
                "enabled": True,
                "mode": "http",
                "botToken": BOT_TOKEN,
                "signingSecret": "${SLACK_SIGNING_SECRET}",
                "httpListen": f"127.0.0.1:{port}",
                "apiRoot": f"{fake.url}/api",
                "dmPolicy": "open",
                **slack,
            }
        }
    }


@asynccontextmanager
async def running(
    root: Path, fake: FakeSlack, model: Any, monkeypatch: pytest.MonkeyPatch, **slack: Any
) -> AsyncIterator[tuple[ShipAgent, SlackChannel, Poster]]:
    """The agent of a project at ``root`` on Slack in HTTP mode, and a poster aimed at its listener."""
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    port = free_port()
    make_project(root, ship_json(fake, port, **slack))
    agent = ShipAgent.from_project(root, model=model)
    channel = SlackChannel(
        agent,
        agent.config.channels.slack,
        state_dir=agent.paths.ship_dir / "channels",
        edit_interval=0.05,
        clock=lambda: float(NOW),
    )
    async with agent, ChannelHost(agent, [channel]), httpx.AsyncClient(timeout=10) as client:
        yield agent, channel, Poster(client, f"http://127.0.0.1:{port}/slack/events")


async def test_a_dm_round_trip_over_http_and_no_secret_in_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, monkeypatch) as (agent, channel, slack),
    ):
        assert channel.health.connected and channel.health.details["events"].endswith("/slack/events")
        await slack.events([fake.user_message("hello there")])
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: hello there")
        answer = await slack.form(  # the app's slash command, form-encoded like a click
            {"command": "/ship", "text": "what now?", "team_id": TEAM, "channel_id": "D0DM"}
            | {"user_id": "U7", "user_name": "ada", "trigger_id": "trig-1"}
        )
        assert answer.status_code == 200
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: what now?")
    assert [m.text for m in fake.shown()] == ["echo: hello there", "echo: what now?"]
    assert agent.paths.transcript(f"slack:{TEAM}:D0DM").exists()
    assert "This chat is on Slack" in (script.requests[-1][-1].instructions or "")  # type: ignore[union-attr]
    assert fake.called("auth.test") and not fake.called("apps.connections.open")  # no socket
    assert SECRET not in caplog.text and BOT_TOKEN not in caplog.text


async def test_a_channel_message_needs_a_mention_and_both_events_of_it_are_one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, monkeypatch, channels={"allow": ["C0GEN"]}) as (
            _,
            _,
            slack,
        ),
    ):
        await slack.events([fake.user_message("just chatting", channel="C0GEN", channel_type="channel")])
        fake.user_message("hi", channel="C0GEN", channel_type="channel", mention=True, user="U8")
        await slack.events(fake.envelopes[-2:])  # message + app_mention: one ts
        await fake.wait_for(lambda: fake.shown("C0GEN") and fake.shown("C0GEN")[-1].text.startswith("echo:"))
    assert [m.text for m in fake.shown("C0GEN")] == ["echo: Mallory (id U8): hi"]
    assert [last_user_text(r) for r in script.requests] == ["Mallory (id U8): hi"]


async def test_slack_retrying_the_same_event_gets_it_answered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, monkeypatch) as (_, channel, slack),
    ):
        first = fake.user_message("only once")
        await slack.events([first])
        retries = [
            await slack.event(first, headers={"X-Slack-Retry-Num": str(n), "X-Slack-Retry-Reason": "timeout"})
            for n in (1, 2)
        ]
        assert [r.status_code for r in retries] == [200, 200]
        await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: only once")
        await slack.events([fake.user_message("then this")])
        await fake.wait_for(lambda: fake.shown()[-1].text == "echo: then this")
        assert channel.listener is not None and channel.listener.retries == 2
    assert [m.text for m in fake.shown()] == ["echo: only once", "echo: then this"]
    assert [last_user_text(r) for r in script.requests] == ["only once", "then this"]


async def test_a_bad_or_stale_signature_is_a_bare_401_and_nothing_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = StreamScript()
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, script.model, monkeypatch) as (_, channel, slack),
    ):
        envelope = fake.user_message("let me in")
        body = json.dumps(envelope.payload).encode()
        wrong = await slack.event(envelope, secret="not-the-signing-secret")
        stale = await slack.event(envelope, timestamp=STALE)  # a real signature, replayed too late
        future = await slack.event(envelope, timestamp=NOW + 5 * 60 + 1)
        tampered = await slack.client.post(  # signed for another body
            slack.url, content=body.replace(b"let me in", b"let me out"), headers=signed(body)
        )
        unsigned = await slack.client.post(slack.url, content=body)
        garbled = await slack.post(body, "application/json", headers={"X-Slack-Request-Timestamp": "soon"})
        refused = [wrong, stale, future, tampered, unsigned, garbled]
        assert [r.status_code for r in refused] == [401] * 6
        assert all(r.content == b"" for r in refused)  # no hint of why
        good = await slack.event(envelope, timestamp=NOW - 5 * 60 + 1)  # still within five minutes
        assert good.status_code == 200
        await fake.wait_for(lambda: fake.shown())
        assert channel.listener is not None and channel.listener.refused == 6
        assert (await slack.client.get(slack.url)).status_code == 405
        elsewhere = await slack.client.post(slack.url.replace("/slack/events", "/other"), content=body)
        assert elsewhere.status_code == 404
    assert [last_user_text(r) for r in script.requests] == ["let me in"]  # the good one only
    assert [m.text for m in fake.shown()] == ["echo: let me in"]


async def test_the_url_verification_challenge_is_answered_only_when_signed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(
        {
            "token": "t",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    )
    async with (
        slack_server() as fake,
        running(tmp_path / "p", fake, StreamScript().model, monkeypatch) as (_, _, slack),
    ):
        answer = await slack.post(body.encode(), "application/json")
        forged = await slack.post(body.encode(), "application/json", secret="guess")
    assert answer.status_code == 200
    assert answer.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    assert forged.status_code == 401 and b"challenge" not in forged.content


def _shell(messages: list[ModelMessage], info: Any, n: int) -> ModelResponse:
    returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")])
    return ModelResponse(
        parts=[ToolCallPart("exec_shell", {"command": "echo ok > approved.txt"}, tool_call_id="s1")]
    )


def _question(fake: FakeSlack) -> BotMessage | None:
    found = [m for m in fake.shown("C0GEN") if m.buttons]
    return found[-1] if found else None


async def test_an_approval_button_press_over_http_from_the_asker_and_not_from_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "p"
    open_channel = {"policy": "open", "requireMention": False}
    async with (
        slack_server() as fake,
        running(root, fake, StreamScript(_shell).model, monkeypatch, channels=open_channel) as (_, _, slack),
    ):
        await slack.events([fake.user_message("clean up", channel="C0GEN", channel_type="channel")])
        await fake.wait_for(lambda: _question(fake) is not None)
        question = _question(fake)
        assert question is not None
        approve = next(b["value"] for b in question.buttons if "Approve" in b["text"]["text"])

        forged = await slack.form({"payload": json.dumps(fake.click(question, approve).payload)}, secret="x")
        assert forged.status_code == 401  # a click is checked like an event
        assert (await slack.click(fake.click(question, approve, user="U8"))).status_code == 200
        await fake.wait_for(lambda: fake.ephemeral)
        assert fake.ephemeral[0]["user"] == "U8" and "Only Ada" in fake.ephemeral[0]["text"]
        assert question.buttons and not (root / "approved.txt").exists()  # still open

        assert (await slack.click(fake.click(question, approve, user="U7"))).status_code == 200
        await fake.wait_for(lambda: question.text.startswith("✅ Approved by Ada"))
        await fake.wait_for(lambda: fake.shown("C0GEN")[-1].text.startswith("finished"))
    assert (root / "approved.txt").read_text() == "ok\n" and question.buttons == []


async def test_a_slow_handling_is_acknowledged_before_it_ends_and_a_failed_one_is_a_500() -> None:
    release, finished = anyio.Event(), anyio.Event()
    errors: list[str] = []

    async def handle(kind: str, payload: dict[str, Any]) -> None:
        if payload["event"]["text"] == "fail":
            raise OSError("disk full")
        await release.wait()  # longer than the listener waits
        finished.set()

    port = free_port()
    listener = EventsListener(
        path="/slack/events",
        signing_secret=SECRET,
        address=("127.0.0.1", port),
        listen=f"127.0.0.1:{port}",
        handle=handle,
        on_error=errors.append,
        clock=lambda: float(NOW),
        ack_within=0.2,
    )
    async with anyio.create_task_group() as tasks, httpx.AsyncClient(timeout=10) as client:
        await listener.start(tasks)
        slack = Poster(client, f"http://127.0.0.1:{port}/slack/events")

        def event(text: str) -> bytes:
            return json.dumps({"type": "event_callback", "event": {"type": "message", "text": text}}).encode()

        slow = await slack.post(event("slow"), "application/json")
        assert slow.status_code == 200 and not finished.is_set()  # answered; the work goes on
        release.set()
        await finished.wait()
        failed = await slack.post(event("fail"), "application/json")
        assert failed.status_code == 500 and "disk full" in errors[0]
        await listener.stop()
        tasks.cancel_scope.cancel()


def test_the_http_mode_keys_are_checked_and_the_secret_is_never_echoed() -> None:
    base = {"enabled": True, "botToken": "xoxb-1"}
    with pytest.raises(ConfigError, match=r"signingSecret is required.*channels\.slack\.mode"):
        parse_config({"channels": {"slack": {**base, "mode": "http"}}})
    with pytest.raises(ConfigError, match=r"appToken is set but channels\.slack\.mode is \"http\""):
        parse_config(
            {"channels": {"slack": {**base, "mode": "http", "appToken": "xapp-1", "signingSecret": "s"}}}
        )
    with pytest.raises(
        ConfigError, match=r"signingSecret is set but channels\.slack\.mode is \"socket\""
    ) as both:
        parse_config({"channels": {"slack": {**base, "appToken": "xapp-1", "signingSecret": "hush-hush"}}})
    assert "hush-hush" not in str(both.value)
    with pytest.raises(ConfigError, match=r"channels\.slack\.httpListen"):
        parse_config({"channels": {"slack": {"httpListen": "everywhere"}}})
    with pytest.raises(ConfigError, match=r"channels\.slack\.httpPath"):
        parse_config({"channels": {"slack": {"httpPath": "slack/events"}}})
    with pytest.raises(ConfigError, match=r"channels\.slack\.mode"):
        parse_config({"channels": {"slack": {"mode": "webhook"}}})
    config = parse_config(
        {"channels": {"slack": {**base, "mode": "http", "signingSecret": "${S}"}}}, env={"S": "hush-hush"}
    )
    slack = config.channels.slack
    assert slack.signing_secret == "hush-hush" and slack.http_address == ("127.0.0.1", 3000)
    assert slack.http_path == "/slack/events" and "hush-hush" not in repr(config)


async def test_an_address_in_use_stops_the_start_with_the_key_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    async with slack_server() as fake:
        taken = int(fake.url.rsplit(":", 1)[1])  # the Slack server's own port
        root = make_project(tmp_path / "p", ship_json(fake, taken))
        agent = ShipAgent.from_project(root, model=StreamScript().model)
        async with agent:
            host = ChannelHost(agent)  # built from ship.json
            with pytest.raises(OSError, match=r"channels\.slack\.httpListen"):
                await host.__aenter__()
            assert not host.health["slack"].connected


async def test_check_names_the_listener_and_asks_for_no_socket_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    async with slack_server() as fake:
        root = make_project(tmp_path / "p", ship_json(fake, 3999))
        result = await anyio.to_thread.run_sync(
            lambda: CliRunner().invoke(app, ["check", "--offline", "-C", str(root)])
        )
    assert f"slack: @ship (user U0SHIPBOT, team {TEAM})" in result.output
    assert "Events API over HTTP on 127.0.0.1:3999/slack/events" in result.output
    assert fake.called("auth.test") and not fake.called("apps.connections.open")
    assert SECRET not in result.output
