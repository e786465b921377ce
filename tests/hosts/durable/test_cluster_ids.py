"""Executor ids claimed in the database: unique per live process, taken over once their owner died.

Each test runs on SQLite and on a real Postgres (the ``database`` fixture). A "worker" here is a
:class:`Heartbeats` connection plus a :class:`Claimant`; a dead one is a real process of this
machine that was started and killed, so the liveness check reads a real ``/proc``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipagent import ConfigError
from shipagent.config import parse_config
from shipagent.hosts.cli._app import app
from shipagent.hosts.durable import DurableSettings, claim_executor_id, resolve_settings
from shipagent.hosts.durable._heartbeat import (
    Claimant,
    Heartbeats,
    preview_executor_id,
    process_alive,
    this_process,
)

HOST = socket.gethostname()


def _settings(root: Path, database: str, **durable: Any) -> DurableSettings:
    config = parse_config({"durable": {"enabled": True, "database": database, **durable}})
    return resolve_settings(config.durable, root)


@pytest.fixture
def settings(tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch) -> DurableSettings:
    monkeypatch.delenv("SHIPAGENT_EXECUTOR_ID", raising=False)
    return _settings(tmp_path, database)


@pytest.fixture
def connections(settings: DurableSettings) -> Iterator[list[Heartbeats]]:
    """Three connections to the database: three workers' views of it."""
    opened = [Heartbeats(settings) for _ in range(3)]
    yield opened
    for beats in opened:
        beats.close()


def dead_process() -> Claimant:
    """The claimant of a process of this machine that ran and is gone (killed, reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claimant = this_process(proc.pid)
        assert process_alive(claimant.pid, claimant.proc) is True
    finally:
        proc.kill()
        proc.wait()
    assert process_alive(claimant.pid, claimant.proc) is False
    return claimant


def age_row(settings: DurableSettings, executor_id: str, seconds: float) -> None:
    """Move a row's heartbeat into the past (as if its owner had been silent that long)."""
    beats = Heartbeats(settings)
    try:
        beats._run(
            "UPDATE shipagent_executors SET heartbeat_at = heartbeat_at - ? WHERE executor_id = ?",
            (seconds, executor_id),
        )
    finally:
        beats.close()


def test_two_live_claimants_get_two_ids(settings: DurableSettings, connections: list[Heartbeats]) -> None:
    a, b, c = connections
    first, second = this_process(), this_process()  # two owners; both processes alive
    assert claim_executor_id(a, settings, first) == f"{HOST}:0"
    assert claim_executor_id(b, settings, second) == f"{HOST}:1"
    # what check would show for a third worker, and what that worker then gets
    assert preview_executor_id(c, settings, this_process()) == (f"{HOST}:2", "")
    assert claim_executor_id(c, settings, this_process()) == f"{HOST}:2"
    assert a.beat(f"{HOST}:0", first.owner) and b.beat(f"{HOST}:1", second.owner)
    assert not a.beat(f"{HOST}:1", first.owner)  # nobody beats an id it does not own


def test_concurrent_claimants_never_share_an_id(
    settings: DurableSettings, connections: list[Heartbeats]
) -> None:
    got: list[str] = []
    barrier = threading.Barrier(len(connections))

    def claim(beats: Heartbeats) -> None:
        me = this_process()
        barrier.wait()
        got.append(claim_executor_id(beats, settings, me))

    threads = [threading.Thread(target=claim, args=(beats,)) for beats in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got) == [f"{HOST}:{n}" for n in range(len(connections))]


def test_a_killed_owners_id_is_taken_over_at_once(
    settings: DurableSettings, connections: list[Heartbeats]
) -> None:
    a, b, _ = connections
    gone = dead_process()
    assert claim_executor_id(a, settings, gone) == f"{HOST}:0"  # then kill -9: the row stays fresh
    row = b.row(f"{HOST}:0")
    assert (
        row is not None
        and row.age < settings.recover_after_seconds
        and row.dead(settings.recover_after_seconds)
    )
    successor = this_process()
    assert claim_executor_id(b, settings, successor) == f"{HOST}:0"  # its replacement resumes it
    assert not a.beat(f"{HOST}:0", gone.owner)  # the old owner, were it back, has lost the id
    assert b.beat(f"{HOST}:0", successor.owner)


def test_a_cleanly_stopped_workers_id_is_free_and_its_row_dead(
    settings: DurableSettings, connections: list[Heartbeats]
) -> None:
    a, b, _ = connections
    first = this_process()  # alive: only the release frees the id
    assert claim_executor_id(a, settings, first) == f"{HOST}:0"
    assert claim_executor_id(b, settings, this_process()) == f"{HOST}:1"
    b.release(f"{HOST}:0", "someone else")  # only the owner releases
    assert b.dead(f"{HOST}:1", settings.recover_after_seconds) == []
    a.release(f"{HOST}:0", first.owner)
    assert [r.executor_id for r in b.dead(f"{HOST}:1", settings.recover_after_seconds)] == [f"{HOST}:0"]
    assert claim_executor_id(b, settings, this_process()) == f"{HOST}:0"


def test_a_stale_claim_this_machine_cannot_check_is_taken_over(
    settings: DurableSettings, connections: list[Heartbeats]
) -> None:
    a, b, _ = connections
    # a process this one cannot check (another pid namespace, a system without /proc)
    elsewhere = Claimant(pid=4242, host=HOST, proc="")
    assert claim_executor_id(a, settings, elsewhere) == f"{HOST}:0"
    assert claim_executor_id(b, settings, this_process()) == f"{HOST}:1"  # alive as far as we know
    age_row(settings, f"{HOST}:0", settings.recover_after_seconds + 5)
    assert claim_executor_id(b, settings, this_process()) == f"{HOST}:0"
    assert not a.beat(f"{HOST}:0", elsewhere.owner)


def test_a_configured_id_held_by_a_live_worker_is_refused(
    tmp_path: Path, database: str, connections: list[Heartbeats]
) -> None:
    named = _settings(tmp_path, database, executorId="box-7")
    a, b, _ = connections
    assert claim_executor_id(a, named, this_process()) == "box-7"
    executor_id, note = preview_executor_id(b, named, this_process())
    assert executor_id == "box-7" and "held by a live worker" in note
    with pytest.raises(ConfigError, match=r"durable\.executorId.*'box-7' is held by a live worker") as err:
        claim_executor_id(b, named, this_process())
    assert err.value.path == "durable.executorId"
    # a dead holder does not block the id: a restarted worker gets it back
    age_row(named, "box-7", named.recover_after_seconds + 5)
    assert claim_executor_id(b, named, this_process()) == "box-7"


def test_one_survivor_takes_a_dead_executor_over(
    settings: DurableSettings, connections: list[Heartbeats]
) -> None:
    a, b, c = connections
    gone = dead_process()
    assert claim_executor_id(a, settings, gone) == f"{HOST}:0"
    survivors = [(b, this_process()), (c, this_process())]
    for n, (beats, me) in enumerate(survivors):  # two live workers under ids of their own
        assert beats.claim_id(f"survivor-{n}", me, settings.recover_after_seconds) is None
    seen = [
        beats.dead(f"survivor-{n}", settings.recover_after_seconds) for n, (beats, _) in enumerate(survivors)
    ]
    assert [[r.executor_id for r in rows] for rows in seen] == [[f"{HOST}:0"]] * 2
    barrier = threading.Barrier(2)
    won: list[bool] = []

    def take(beats: Heartbeats, me: Claimant, row: Any) -> None:
        barrier.wait()
        won.append(beats.take_over(row, me, settings.recover_after_seconds))

    threads = [
        threading.Thread(target=take, args=(beats, me, rows[0]))
        for (beats, me), rows in zip(survivors, seen, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won) == [False, True]
    # while the winner (alive) resumes its turns, the row is neither dead nor claimable
    assert b.dead("survivor-0", settings.recover_after_seconds) == []
    assert claim_executor_id(b, settings, this_process()) == f"{HOST}:1"


def test_check_prints_the_id_a_worker_would_claim(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHIPAGENT_EXECUTOR_ID", raising=False)
    project = tmp_path / "p"
    project.mkdir()
    ship = {"llm": {"model": "test"}, "durable": {"enabled": True, "database": database}}
    import json

    (project / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    out = CliRunner().invoke(app, ["check", "-C", str(project)])
    assert out.exit_code == 0, out.output
    assert (
        f"durable: a worker started here would be executor {HOST}:0 (first free <hostname>:<n>)" in out.output
    )
    settings = resolve_settings(parse_config(ship).durable, project)
    beats = Heartbeats(settings)
    try:
        assert claim_executor_id(beats, settings, this_process()) == f"{HOST}:0"  # a live worker
        out = CliRunner().invoke(app, ["check", "-C", str(project)])
        assert out.exit_code == 0, out.output
        assert f"durable: a worker started here would be executor {HOST}:1 (" in out.output
        assert f"durable executor {HOST}:0: pid " in out.output and "(alive)" in out.output
    finally:
        beats.close()


def test_an_executor_table_of_the_earlier_layout_gains_the_owner_columns(settings: DurableSettings) -> None:
    old = (
        "CREATE TABLE shipagent_executors "
        "(executor_id TEXT PRIMARY KEY, heartbeat_at {real} NOT NULL, pid INTEGER, host TEXT)"
    )
    if settings.is_sqlite:
        import sqlite3

        conn: Any = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute(old.replace("{real}", "REAL"))
        conn.execute("INSERT INTO shipagent_executors VALUES ('old:0', 1.0, 7, 'h')")
    else:
        import psycopg

        conn = psycopg.connect(settings.database_url, autocommit=True)
        conn.execute(old.replace("{real}", "DOUBLE PRECISION"))
        conn.execute("INSERT INTO shipagent_executors VALUES ('old:0', 1.0, 7, 'h')")
    conn.close()
    beats = Heartbeats(settings)
    try:
        (row,) = beats.rows()
        assert (row.executor_id, row.owner, row.pid) == ("old:0", "", 7)
        assert row.dead(settings.recover_after_seconds)  # a heartbeat from 1970
        assert beats.take_over(row, this_process(), settings.recover_after_seconds)
    finally:
        beats.close()
