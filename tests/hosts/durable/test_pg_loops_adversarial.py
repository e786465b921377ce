"""A cluster's Postgres from the awkward callers: a cancelled tool, a tool that fails after
writing, a cancelled run whose worker thread is mid-call, a thread that outlived its loop, a sync
write on the loop's own thread while a worker thread is sharing, a password in the URL's query, a
loop per command fifty times; and the async twins on the files backend.

Five of these once went wrong: the cancelled tool's file stayed on its machine, so did the worker
thread's, the late thread got a raw ``RuntimeError``, the loop's thread waited forever on the
worker that was waiting for the loop, and the password was printed in the error.
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import psycopg
import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.errors import ShipAgentError
from shipagent.store import PgStores
from shipagent.store._pg_base import PgPool
from shipagent.store._pg_files import ClusterContextFiles
from shipagent.window.compaction import summary_id
from tests.core.test_ledger import KEY, _scripted_chat
from tests.support.net import free_port

WAITING = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'shipagent.context_content'::regclass"
)


@pytest.mark.anyio
async def test_a_file_written_in_a_session_that_is_cancelled_meanwhile_is_still_stored_for_every_worker(
    tmp_path: Path, pg_database: str
) -> None:
    """A turn cancelled while a tool's file work runs: the work finished, so its file is shared."""
    one = ClusterContextFiles(ShipPaths(tmp_path / "one"), PgStores(pg_database))
    two = ClusterContextFiles(ShipPaths(tmp_path / "two"), PgStores(pg_database))
    refs: list[Any] = []
    with anyio.CancelScope() as scope:
        async with one.session(KEY) as local:

            def work() -> None:
                refs.append(local.add_artifact(KEY, "the build failed\n", name="log", source="tool:make"))
                anyio.from_thread.run_sync(scope.cancel)  # the turn is cancelled while the thread runs

            await anyio.to_thread.run_sync(work)
    assert scope.cancel_called
    assert [r.id for r in await two.alist(KEY)] == [refs[0].id]
    assert (await two.aread(KEY, refs[0].id)).content == "the build failed\n"
    await one.stores.close()
    await two.stores.close()


@pytest.mark.anyio
async def test_a_file_written_in_a_session_whose_work_then_fails_is_stored_and_the_failure_kept(
    tmp_path: Path, pg_database: str
) -> None:
    one = ClusterContextFiles(ShipPaths(tmp_path / "one"), PgStores(pg_database))
    two = ClusterContextFiles(ShipPaths(tmp_path / "two"), PgStores(pg_database))

    def work(local: Any) -> None:
        local.add_artifact(KEY, "half of it\n", name="log", source="tool:make")
        raise ValueError("the tool failed after writing")

    with pytest.raises(ValueError, match="failed after writing"):
        async with one.session(KEY) as local:
            await anyio.to_thread.run_sync(work, local)
    (ref,) = await two.alist(KEY)
    assert (await two.aread(KEY, ref.id)).content == "half of it\n"
    await one.stores.close()
    await two.stores.close()


def test_a_sync_call_from_a_worker_thread_that_outlived_its_loop_runs_on_a_loop_of_its_own(
    tmp_path: Path, pg_database: str
) -> None:
    files = ClusterContextFiles(ShipPaths(tmp_path), PgStores(pg_database))
    running, loop_over, done = threading.Event(), threading.Event(), threading.Event()
    answers: list[Any] = []

    def late() -> None:  # a thread the loop stopped waiting for (abandon_on_cancel)
        running.set()
        loop_over.wait(60)
        try:
            answers.append(files.list(KEY))
        except Exception as exc:
            answers.append(exc)
        done.set()

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(anyio.to_thread.run_sync, late, abandon_on_cancel=True))
                await anyio.to_thread.run_sync(running.wait)
                scope.cancel()

    anyio.run(main)
    loop_over.set()
    done.wait(60)
    assert answers == [[]]


def _hold_the_content(url: str, locked: threading.Event, release: threading.Event) -> None:
    """Another client holds ``context_content`` exclusively until told (or, as a last resort, a minute)."""
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE shipagent.context_content IN ACCESS EXCLUSIVE MODE")
        locked.set()
        release.wait(60)
        conn.rollback()


async def _until_a_share_waits(pg_database: str) -> None:
    """Return once a worker thread's share of a file waits on the locked table."""
    async with await psycopg.AsyncConnection.connect(pg_database, autocommit=True) as watcher:
        while True:
            count = await (await watcher.execute(WAITING)).fetchone()
            if count is not None and count[0] > 0:
                return
            await anyio.sleep(0.01)


def test_a_sync_write_on_the_loops_thread_is_refused_while_a_worker_thread_is_sharing_one(
    tmp_path: Path, pg_database: str
) -> None:
    """The worker thread holds the files' lock while it waits on the loop for Postgres; the loop's
    own thread must be refused at once, not wait for that lock (the worker would wait forever)."""
    files = ClusterContextFiles(ShipPaths(tmp_path), PgStores(pg_database))
    locked, release = threading.Event(), threading.Event()
    seen: list[str] = []
    (tmp_path / "b.txt").write_text("b\n", encoding="utf-8")

    async def main() -> None:
        await files.alist(KEY)  # the schema exists
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _hold_the_content, pg_database, locked, release)
            await anyio.to_thread.run_sync(locked.wait)
            tg.start_soon(
                anyio.to_thread.run_sync, partial(files.add_artifact, KEY, "a", name="a", source="t")
            )
            await _until_a_share_waits(pg_database)  # (the worker thread holds the files' lock)
            try:  # on the loop's thread
                files.add_artifact_file(KEY, tmp_path / "b.txt", name="b", source="t")
            except ShipAgentError as exc:
                seen.append(str(exc))
            release.set()

    thread = threading.Thread(target=anyio.run, args=(main,), daemon=True)
    thread.start()
    thread.join(120)  # only if the loop's thread is stuck: then the assertions below fail
    release.set()
    assert not thread.is_alive(), "the loop's thread is waiting for the worker that waits for it"
    assert len(seen) == 1 and "would block the running event loop" in seen[0]
    assert [r.name for r in files.list(KEY)] == ["a"]


def test_a_password_in_the_urls_query_is_not_in_the_error_when_postgres_cannot_be_reached() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/db?password=hunter2&sslmode=disable"

    async def main() -> None:
        await PgPool(url).fetch("SELECT 1")

    with pytest.raises(ShipAgentError) as caught:
        anyio.run(main)
    assert "hunter2" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value) and "sslmode=disable" in str(caught.value)


def test_a_sync_write_from_a_worker_thread_still_lands_when_its_loop_is_cancelled_meanwhile(
    tmp_path: Path, pg_database: str
) -> None:
    """The run is cancelled while its worker thread waits on the loop for Postgres: the thread's
    call still finishes on that loop (the loop waits for the thread), and every worker sees the file."""
    files = ClusterContextFiles(ShipPaths(tmp_path / "one"), PgStores(pg_database))
    locked, release = threading.Event(), threading.Event()

    async def main() -> None:
        await files.alist(KEY)  # the schema exists
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _hold_the_content, pg_database, locked, release)
            await anyio.to_thread.run_sync(locked.wait)
            tg.start_soon(
                anyio.to_thread.run_sync, partial(files.add_artifact, KEY, "a", name="a", source="t")
            )
            await _until_a_share_waits(pg_database)
            tg.cancel_scope.cancel()
            release.set()

    anyio.run(main)
    others = ClusterContextFiles(ShipPaths(tmp_path / "two"), PgStores(pg_database))
    assert [r.name for r in others.list(KEY)] == ["a"]


def test_fifty_loops_one_after_another_leave_only_the_last_ones_connections_open(pg_database: str) -> None:
    """A CLI runs a loop per command: the shares of loops that ended are closed, not kept."""
    pool = PgPool(pg_database)

    async def command() -> None:
        async with anyio.create_task_group() as tg:  # two queries at once: two connections
            tg.start_soon(pool.fetch, "SELECT pg_sleep(0.001)")
            tg.start_soon(pool.fetch, "SELECT pg_sleep(0.001)")

    for _ in range(50):
        anyio.run(command)
    with psycopg.connect(pg_database, autocommit=True) as conn:
        (row,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert row[0] <= 2


@pytest.mark.anyio
async def test_on_the_files_backend_the_async_twins_answer_what_the_sync_methods_do(tmp_path: Path) -> None:
    """The async twins the cluster needed change nothing for a project on files."""
    agent, capture = await _scripted_chat(tmp_path)
    history = await agent.ahistory(KEY)
    sid = summary_id(history[0])
    assert sid is not None
    records = await anyio.to_thread.run_sync(agent.ledger, KEY)
    received = [await agent.areconstruct(KEY, r.request_id, r.step) for r in records]
    expanded = await agent.aexpand(KEY, sid)
    listed = await agent.context_files.alist(KEY)

    def sync() -> tuple[Any, ...]:
        again = [agent.reconstruct(KEY, r.request_id, r.step) for r in records]
        return agent.history(KEY), agent.expand(KEY, sid), again, agent.context_files.list(KEY)

    assert await anyio.to_thread.run_sync(sync) == (history, expanded, received, listed)
    assert received == capture.requests and expanded and listed
