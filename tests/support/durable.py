"""Real components for the durable tests: a throwaway Postgres cluster and worker processes.

Postgres: ``SHIPAGENT_TEST_DATABASE_URL`` when set; otherwise a cluster made with ``initdb`` in a
temp dir (as the ``postgres`` system user when running as root — initdb refuses root) and started
with ``pg_ctl`` on a free loopback port, removed after the session. Under ``CI=true`` a Postgres
that cannot start fails the tests instead of skipping them.

Workers: ``shipagent worker`` processes using the scripted model of
``tests.support.durable_worker`` (through the ``--model-factory`` testing hook), with the
repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import child_env

SHIPAGENT = str(Path(sys.executable).parent / "shipagent")


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Postgres is required in CI: {reason}")
    pytest.skip(f"Postgres unavailable: {reason}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A server URL (database ``postgres``) for the whole session."""
    given = os.environ.get("SHIPAGENT_TEST_DATABASE_URL")
    if given:
        yield given
        return
    bindir = _pg_bin()
    if bindir is None:
        _unavailable("no pg_ctl on PATH or under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
        return
    base = Path(tempfile.mkdtemp(prefix="shipagent-pg-"))
    base.chmod(0o755)
    data = base / "data"
    data.mkdir()
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(data, "postgres", "postgres")
    port = _free_port()
    try:
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(data)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off",
                "-l",
                str(data / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        detail = getattr(exc, "stderr", b"") or b""
        _unavailable(f"{exc} {detail.decode(errors='replace')[-500:]}")
        return
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new empty database on ``server`` for one test (dropped after)."""
    import psycopg

    name = f"shipagent_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = server.rpartition("/")
    try:
        yield f"{head}/{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def durable_project(root: Path, database: str, *, recover_after: float = 30) -> Path:
    """A project whose turns are durable on ``database`` and whose tools include the test tools."""
    root.mkdir(parents=True, exist_ok=True)
    ship = {
        "name": "durable-test",
        "durable": {"enabled": True, "database": database, "recoverAfterSeconds": recover_after},
        "tools": {"modules": ["tests.support.durable_worker"]},
    }
    (root / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    (root / "signals").mkdir(exist_ok=True)
    return root


def worker_env(project: Path, **extra: str) -> dict[str, str]:
    env = child_env()
    env["SHIPAGENT_TEST_DIR"] = str(project / "signals")
    env.update(extra)
    return env


class Worker:
    """A ``shipagent worker`` subprocess; its output is collected by a reader thread."""

    def __init__(
        self, project: Path, executor_id: str, *, concurrency: int | None = None, **env: str
    ) -> None:
        args = [SHIPAGENT, "worker", "-C", str(project), "--executor-id", executor_id]
        args += ["--model-factory", "tests.support.durable_worker:scripted_model"]
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        self.executor_id = executor_id
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=worker_env(project, **env),
            text=True,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if " ready on " in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 90) -> Worker:
        if not self._ready.wait(timeout):
            self.stop()
            raise AssertionError(f"worker {self.executor_id} did not start:\n" + "\n".join(self.lines[-40:]))
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout}s")
        time.sleep(0.05)


@pytest.fixture
def pg_database(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's Postgres for one test."""
    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """ship.json ``durable.database`` for a test run on both: ``sqlite``, then a fresh Postgres one."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    with fresh_database(request.getfixturevalue("postgres_server")) as url:
        yield url


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
