"""``ClusterContextFiles``: two machines' ``.ship/context/`` kept in step through Postgres (real server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.errors import NotFoundError, ShipAgentError
from shipagent.store import PgStores
from shipagent.store._pg_files import ClusterContextFiles
from shipagent.tools.files import ContextFiles

KEY = "web:ann"


def _machines(tmp_path: Path, url: str) -> tuple[ClusterContextFiles, ClusterContextFiles]:
    return (
        ClusterContextFiles(ShipPaths(tmp_path / "one"), PgStores(url)),
        ClusterContextFiles(ShipPaths(tmp_path / "two"), PgStores(url)),
    )


def test_files_written_on_one_machine_are_listed_read_and_replaced_on_the_other(
    tmp_path: Path, pg_database: str
) -> None:
    one, two = _machines(tmp_path, pg_database)
    log = tmp_path / "build.log"
    log.write_bytes(b"step 1 ok\nstep 2 \xff broken\n")  # not UTF-8: kept as it is
    shell = one.add_artifact_file(KEY, log, name="exec_shell stdout", source="tool:exec_shell", move=True)
    spill = one.add_artifact(KEY, "ünïcode " * 3000, name="search result", source="tool:search")
    one.set_catalog(KEY, "catalog v1")

    listed = two.list(KEY)
    assert [r.id for r in listed] == ["catalog", spill.id, shell.id]  # newest first, as on machine one
    assert not (two.folder(KEY) / f"{spill.id}.txt").exists()  # listing fetches no bytes
    page = two.read(KEY, spill.id, 10, 20)  # "ünïcode " is 10 bytes
    assert (page.offset, page.content) == (10, "ünïcode ünïcode ")
    assert (two.folder(KEY) / f"{spill.id}.txt").read_bytes() == ("ünïcode " * 3000).encode()
    assert two.path_of(KEY, two.get(KEY, shell.id)).read_bytes() == b"step 1 ok\nstep 2 \xff broken\n"
    assert two.grep(KEY, shell.id, "broken").total_matches == 1
    assert two.tail(KEY, "catalog").content == "catalog v1"

    one.set_catalog(KEY, "catalog v2")  # rewritten on machine one: machine two's copy is replaced
    assert two.tail(KEY, "catalog").content == "catalog v2"
    two.set_catalog(KEY, "catalog v2")  # the same text: nothing is written again
    index = (two.folder(KEY) / "index.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in index] == [shell.id, spill.id, "catalog", "catalog"]

    # the local layout is the file store's: a plain ContextFiles reads machine two's folder
    plain = ContextFiles(ShipPaths(tmp_path / "two"))
    assert plain.read(KEY, spill.id, 0, 1 << 20).content == "ünïcode " * 3000
    with pytest.raises(NotFoundError, match="not found for this chat"):
        two.get("web:other", spill.id)  # another chat's ids are not visible


def test_an_import_on_one_machine_is_readable_on_the_other(tmp_path: Path, pg_database: str) -> None:
    one, two = _machines(tmp_path, pg_database)
    source = ContextFiles(ShipPaths(tmp_path / "elsewhere"))
    ref = source.add_history(KEY, "# the old conversation\nuser: hi\n", name="history")
    one.import_(KEY, source.export(KEY))
    assert two.read(KEY, ref.id).content == "# the old conversation\nuser: hi\n"


def test_an_unreachable_database_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    files = ClusterContextFiles(ShipPaths(tmp_path), PgStores("postgresql://ship:s3cret@127.0.0.1:1/ship"))
    with pytest.raises(ShipAgentError) as caught:
        files.add_artifact(KEY, "x" * 100, name="out", source="tool:t")
    assert "cannot connect to Postgres at postgresql://ship:***@127.0.0.1:1/ship" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    assert not files.folder(KEY).exists()  # nothing half-written


def test_the_context_cli_on_a_cluster_member_exports_what_another_machine_wrote(
    tmp_path: Path, pg_database: str
) -> None:
    from typer.testing import CliRunner

    from shipagent.hosts.cli import _app as cli

    one, _ = _machines(tmp_path, pg_database)
    ref = one.add_artifact(KEY, "日志 🎉\nline two\n", name="stdout of make", source="tool:exec_shell")
    member = tmp_path / "member"
    member.mkdir()
    ship = {"durable": {"enabled": True, "database": pg_database}}
    (member / "ship.json").write_text(json.dumps(ship), encoding="utf-8")
    runner = CliRunner()
    listed = runner.invoke(cli.app, ["context", "list", KEY, "-C", str(member), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.output)] == [ref.id]
    exported = runner.invoke(cli.app, ["context", "export", KEY, "-C", str(member)])
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.output)["files"][f"{ref.id}.txt"] == "日志 🎉\nline two\n"
