"""A throwaway Postgres for the tests: one server per test session, a fresh database per test.

``SHIPAGENT_TEST_DATABASE_URL`` when set; otherwise a cluster made with ``initdb`` in a temp dir (as
the ``postgres`` system user when running as root — initdb refuses root) and started with
``pg_ctl`` on a free loopback port, removed at the end. Under ``CI=true`` a Postgres that cannot
start fails the tests instead of skipping them. The fixtures over this (``postgres_server``,
``pg_database``) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.net import free_port


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Postgres is required in CI: {reason}")
    pytest.skip(f"Postgres unavailable: {reason}")


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


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A server URL (database ``postgres``) while the context lasts; skips (fails in CI) without one."""
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
    port = free_port()
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
