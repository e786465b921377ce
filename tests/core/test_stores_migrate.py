"""``shipagent migrate``: files → Postgres → files gives back the very bytes, re-runs are no-ops,
and a target that disagrees is reported (exit 1) and left alone."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import psycopg
import pytest
from click.testing import Result
from typer.testing import CliRunner

from shipagent.hosts.cli import _app as cli
from tests.support.core import (
    ScriptedModel,
    answer,
    has_tool_return,
    make_agent,
    make_project,
    tool_call,
    user_texts,
)

SHIPAGENT = str(Path(sys.executable).parent / "shipagent")
SHIP = {
    "name": "migrating",
    "context": {
        "chatHistory": {"inMemoryMaxMessages": 8, "compactKeepLastMessages": 4},
        "agentContext": {"windowEntries": 3},
    },
}
CHATS = ["telegram:chat:42", "'; DROP TABLE shipagent.messages; --", "long " * 40 + "ключ 🚢"]


def lookup(topic: str) -> str:
    return f"facts about {topic} ✓"


async def make_busy_project(root: Path) -> None:
    """A project whose every store has something: turns with tools, compactions, windows, files, cards."""

    def reply(messages, info, n):  # type: ignore[no-untyped-def]
        if has_tool_return(messages):
            return answer(f"answer {n}: ünïcödé 🚢")
        return tool_call("lookup", {"topic": user_texts(messages)[-1]}, call_id=f"call-{n}")

    make_project(root, SHIP)
    agent = make_agent(root, ScriptedModel(reply).model, [lookup])
    async with agent:
        for chat in CHATS:
            for i in range(4):
                assert (await agent.run(chat, f"question {i} of {chat}")).success
            agent.context_files.add_artifact(chat, "spilled\n" * 500, name="output", source="test")
            agent.context_files.set_catalog(chat, "catalog v1")
            agent.context_files.set_catalog(chat, "catalog v2 ✓")  # the index names the id twice


def _migrated(relative: Path) -> bool:
    """Whether ``migrate`` carries this ``.ship`` file: not the card database (compared by rows), not
    the request ledger (``requests*.jsonl`` and ``ledger/``: per-machine diagnostics, not a store)
    nor a chat's ``usage.json`` and the version before it, ``.usage.json.old`` (this machine's count
    for the chat's budgets), not the process lock."""
    if relative.name.startswith("cardbox.sqlite3") or relative == Path("lock"):
        return False
    ledger = relative.name.startswith(("requests", "usage.json", ".usage.json")) or "ledger" in relative.parts
    return not (relative.parts[0] == "chats" and ledger)


def ship_files(root: Path) -> dict[str, bytes]:
    ship = root / ".ship"
    return {
        str(p.relative_to(ship)): p.read_bytes()
        for p in sorted(ship.rglob("*"))
        if p.is_file() and _migrated(p.relative_to(ship))
    }


def card_rows(root: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(root / ".ship" / "cardbox.sqlite3") as conn:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}"))
            for t in ("cards", "boxes", "box_cards", "named_boxes")
        }


def migrate(root: Path, flag: str, url: str) -> subprocess.CompletedProcess[str]:
    """The real command, in its own process."""
    return subprocess.run(
        [SHIPAGENT, "migrate", "-C", str(root), flag, url], capture_output=True, text=True, timeout=120
    )


def migrate_here(*args: str) -> Result:
    """The same command in this process (a CLI start costs seconds on a busy machine)."""
    return CliRunner().invoke(cli.app, ["migrate", *args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def busy_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("busy") / "project"
    anyio.run(make_busy_project, root)
    return root


def test_files_to_postgres_to_files_is_byte_identical(
    tmp_path: Path, pg_database: str, busy_project: Path
) -> None:
    first, second = busy_project, tmp_path / "second"
    original = ship_files(first)
    assert any(name.startswith("context/") and name.endswith("index.jsonl") for name in original)
    assert any("~" in name for name in original)  # the long key's hashed folder name

    out = migrate(first, "--to", pg_database)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "migrated 3 chat(s)" in out.stdout and "every store matches" in out.stdout
    with psycopg.connect(pg_database) as conn:
        counts = dict(
            conn.execute("SELECT chat_key, count(*) FROM shipagent.transcript GROUP BY chat_key").fetchall()
        )
    assert counts == dict.fromkeys(CHATS, 8)  # 4 turns x (user + answer) per chat, keys as data

    again = migrate_here("-C", str(first), "--to", pg_database)  # idempotent: nothing copied twice
    assert again.exit_code == 0, again.stdout + again.stderr
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT count(*) FROM shipagent.transcript").fetchone() == (24,)
        assert conn.execute("SELECT count(*) FROM shipagent.cards").fetchone() == (24,)

    make_project(second, SHIP)
    back = migrate_here("-C", str(second), "--from", pg_database)
    assert back.exit_code == 0, back.stdout + back.stderr
    assert ship_files(second) == original  # every JSONL line, index line and context file, byte for byte
    assert card_rows(second) == card_rows(first)


def test_a_target_that_disagrees_is_reported_and_left_alone(
    tmp_path: Path, pg_database: str, busy_project: Path
) -> None:
    first, second = busy_project, tmp_path / "second"
    assert migrate_here("-C", str(first), "--to", pg_database).exit_code == 0
    make_project(second, SHIP)
    assert migrate_here("-C", str(second), "--from", pg_database).exit_code == 0
    with psycopg.connect(pg_database) as conn:
        conn.execute(
            'UPDATE shipagent.transcript SET record = \'{"text": "tampered"}\' WHERE chat_key = %s AND seq = 2',
            (CHATS[0],),
        )
    before = ship_files(second)
    out = migrate_here("-C", str(second), "--from", pg_database)
    assert out.exit_code == 1
    assert "MISMATCH" in out.stdout
    assert (
        f"mismatch: chat {CHATS[0]!r} store transcript: source 8, target 8: target holds different records; "
        "not touched" in out.stderr
    )
    assert "1 store(s) do not match" in out.stderr
    assert ship_files(second) == before


def test_usage_errors_are_clear(tmp_path: Path) -> None:
    make_project(tmp_path, SHIP)
    both = migrate_here("-C", str(tmp_path))
    assert both.exit_code == 2
    assert "give exactly one of --to postgresql://… or --from postgresql://…" in both.stderr
    bad = migrate_here("-C", str(tmp_path), "--to", "mysql://u:pw@h/db")
    assert bad.exit_code == 2 and "is not a postgresql:// URL" in bad.stderr and "pw@" not in bad.stderr
    down = migrate_here("-C", str(tmp_path), "--to", "postgresql://u:secretpw@127.0.0.1:1/db")
    assert down.exit_code == 2
    assert "cannot connect to Postgres at postgresql://u:***@127.0.0.1:1/db" in down.stderr
    assert "secretpw" not in down.stderr + down.stdout
    assert not list(tmp_path.rglob("*.jsonl"))  # nothing was written anywhere
