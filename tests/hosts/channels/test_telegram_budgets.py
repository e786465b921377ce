"""A Telegram chat over its budget: the refusal is the answer, and ``/status`` shows the use."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.hosts.channels._support import running, ship_json
from tests.support.core import make_project
from tests.support.stream import StreamScript
from tests.support.telegram_server import telegram_server

pytestmark = pytest.mark.anyio
EVENING = datetime(2026, 3, 10, 21, 48, tzinfo=UTC)


async def test_the_refusal_reaches_the_user_and_status_shows_use_against_budget(tmp_path: Path) -> None:
    script = StreamScript()
    async with telegram_server() as fake:
        root = tmp_path / "p"
        make_project(root, {**ship_json(fake), "context": {"budgets": {"tokensPerDay": 20}}})
        async with running(root, fake, script.model) as (agent, _):
            agent.clock = lambda: EVENING
            fake.user_message("one")  # every turn uses more than 20 tokens: this one crosses
            await fake.wait_for(lambda: fake.shown() and fake.shown()[-1].text == "echo: one")
            fake.user_message("two")
            await fake.wait_for(lambda: "context.budgets.tokensPerDay" in fake.shown()[-1].text)
            refusal = fake.shown()[-1].text
            assert refusal.startswith("⚠️ This chat has used ") and "of its 20 tokens for today" in refusal
            assert "resets at 00:00 UTC (in 2 h 12 min)" in refusal
            assert len(script.requests) == 1

            fake.user_message("/status")
            await fake.wait_for(lambda: "Model: script" in fake.shown()[-1].text)
            status = fake.shown()[-1].text
            used = json.loads(agent.budgets.store.path("telegram:chat:42").read_text())["days"][0]
            tokens = used["inputTokens"] + used["outputTokens"]
            assert (
                f"Usage today: {tokens:,} of 20 tokens, price unknown; resets 2026-03-11 00:00 UTC" in status
            )
            assert "Over budget: context.budgets.tokensPerDay" in status
