"""Postgres-only store behaviour: one-transaction commits under crashes, shared state, the schema."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from shipagent.errors import ShipAgentError
from shipagent.store import Committed, PgStores, TurnWrite
from shipagent.tools.files import ContextRef
from tests.support.paths import child_env

pytestmark = pytest.mark.anyio


def turn(chat_key: str, request_id: str, text: str = "question") -> TurnWrite:
    messages = [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart("answer")])]
    return TurnWrite(chat_key, request_id, text, "answer", messages, sent=["note"], tool_calls=[])


async def visible(stores: PgStores, chat_key: str) -> dict[str, int]:
    box = await stores.cards.get_box(await stores.cards.named_box(f"output:{chat_key}"))
    return {
        "messages": await stores.messages.count(chat_key),
        "transcript": await stores.transcript.count(chat_key),
        "agentContext": await stores.agent_context.count(chat_key),
        "cards": len(box.card_ids),
    }


NOTHING = {"messages": 0, "transcript": 0, "agentContext": 0, "cards": 0}


async def test_connection_killed_mid_commit_leaves_nothing_of_the_turn(pg_database: str) -> None:
    stores = PgStores(pg_database)
    await stores.commit_turn(turn("c", "r1"))
    before = await visible(stores, "c")

    async def kill_own_backend(conn: Any) -> None:
        with psycopg.connect(pg_database, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))

    stores.before_commit = kill_own_backend
    with pytest.raises(psycopg.OperationalError):
        await stores.commit_turn(turn("c", "r2"))
    stores.before_commit = None
    assert await visible(stores, "c") == before  # none of r2: not its history, transcript, entry or cards
    assert await stores.messages.last_committed("c") == Committed(1, "r1")
    assert len(await stores.commit_turn(turn("c", "r2"))) == 2  # the retry; the dead connection was dropped
    assert await stores.commit_turn(turn("c", "r2")) == []  # and once is enough
    assert await stores.messages.last_committed("c") == Committed(2, "r2")
    assert [r["requestId"] for r in await stores.transcript.last("c", 10)] == ["r1"] * 3 + ["r2"] * 3
    await stores.close()


def crash_in_commit(child: str, signal_file: Path, pg_database: str) -> None:
    """Run ``child`` until it is inside its commit transaction, SIGKILL it, wait for its backend to go."""
    proc = subprocess.Popen([sys.executable, "-c", child], env=child_env())
    try:
        deadline = time.monotonic() + 60
        while not signal_file.exists():
            assert proc.poll() is None, "the child exited before reaching its commit"
            assert time.monotonic() < deadline, "the child never reached its commit"
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no rollback, no goodbye; the server must notice by itself
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        for _ in range(200):
            alive = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'crashing-worker'"
            ).fetchone()
            if alive == (0,):
                break
            time.sleep(0.05)
        assert alive == (0,), "the dead worker's backend is still there"


async def test_worker_killed_9_mid_commit_leaves_nothing_and_no_lock(
    pg_database: str, tmp_path: Path
) -> None:
    signal_file = tmp_path / "in-transaction"
    child = textwrap.dedent(
        f"""
        import anyio, pathlib, sys
        from tests.core.test_stores_postgres import turn
        from shipagent.store import PgStores

        async def main():
            stores = PgStores({pg_database + "?application_name=crashing-worker"!r})
            async def pause(conn):
                pathlib.Path({str(signal_file)!r}).write_text("x")
                await anyio.sleep(120)
            stores.before_commit = pause
            await stores.commit_turn(turn("chat:1", "r-crash"))

        anyio.run(main)
        """
    )
    await anyio.to_thread.run_sync(crash_in_commit, child, signal_file, pg_database)
    stores = PgStores(pg_database)
    assert await visible(stores, "chat:1") == NOTHING
    with anyio.fail_after(10):  # its advisory and row locks died with it
        await stores.commit_turn(turn("chat:1", "r-next"))
    assert await stores.messages.last_committed("chat:1") == Committed(1, "r-next")
    assert (await visible(stores, "chat:1"))["cards"] == 2
    await stores.close()


async def test_two_workers_share_chats_and_context_files(pg_database: str, tmp_path: Path) -> None:
    a, b = PgStores(pg_database), PgStores(pg_database)
    ref = ContextRef(
        "a1b2c3", "artifact", "log", "", 0, "2026-11-23T00:00:00.000Z", "text/plain", True, "t", "a.txt"
    )
    await a.context_files.put("c", ref, b"spilled by worker a\n" * 1000)
    assert (await b.context_files.tail("c", "a1b2c3", 1)).content == "spilled by worker a\n"
    assert (await b.context_files.read("c", "a1b2c3", 0, 19)).content == "spilled by worker a"
    seen = await b.messages.last_committed("c")
    await a.commit_turn(turn("c", "r1"))
    assert await b.messages.last_committed("c") != seen  # b knows to reload the chat
    assert [r.data["requestId"] for r in await b.messages.records("c")] == ["r1"]
    await a.close()
    await b.close()


async def test_schema_is_created_once_by_concurrent_starters_and_versioned(pg_database: str) -> None:
    starters = [PgStores(pg_database) for _ in range(4)]
    async with anyio.create_task_group() as tg:
        for stores in starters:
            tg.start_soon(stores.pool.ensure_schema)
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT id, version FROM shipagent.schema_version").fetchall() == [(1, 1)]
        conn.execute("UPDATE shipagent.schema_version SET version = 99")
    for stores in starters:
        await stores.close()
    with pytest.raises(
        ShipAgentError, match="holds shipagent schema version 99; this shipagent knows version 1"
    ):
        await PgStores(pg_database).messages.count("c")


async def test_connection_errors_name_the_server_not_the_password() -> None:
    stores = PgStores("postgresql://app:s3cret-pw@127.0.0.1:1/nowhere")
    with pytest.raises(ShipAgentError) as caught:
        await stores.messages.count("c")
    assert "cannot connect to Postgres at postgresql://app:***@127.0.0.1:1/nowhere" in str(caught.value)
    assert "s3cret" not in str(caught.value)
