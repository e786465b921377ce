"""Export / import of one chat's context files: byte-exact round trips, and hostile exports refused whole."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.errors import BadRequestError
from shipagent.tools.files import ContextFiles

KEY = "telegram:chat:42"


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (the whole temp dir, not only the project)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


@pytest.fixture
def source(tmp_path: Path) -> ContextFiles:
    files = ContextFiles(ShipPaths(tmp_path / "old"))
    files.add_artifact(
        KEY, "日志 🎉\r\nline two\n\x00binary-ish NUL\n", name="stdout", source="tool:exec_shell"
    )
    files.add_history(KEY, "## user · 2026-11-22 02:30:00 UTC\n你好 👋\n", name="conversation")
    files.write_catalog(KEY, skills=[("deploy", "Ship it")], tools=[("exec_shell", "Run")])
    files.add_artifact("someone:else", "not exported", name="x", source="test")
    return files


def test_export_holds_refs_and_files_of_one_chat_only(source: ContextFiles) -> None:
    data = source.export(KEY)
    assert data["conversationId"] == KEY and data["version"] == 1
    assert isinstance(data["exportedAt"], int)
    assert [item["kind"] for item in data["items"]] == ["artifact", "history", "catalog"]
    assert set(data["files"]) == {item["path"] for item in data["items"]}
    assert "not exported" not in json.dumps(data)


def test_export_then_import_into_a_new_project_reproduces_every_byte(
    source: ContextFiles, tmp_path: Path
) -> None:
    data = json.loads(json.dumps(source.export(KEY), ensure_ascii=False))  # through real JSON text
    target = ContextFiles(ShipPaths(tmp_path / "new"))
    refs = target.import_(KEY, data)
    old_refs, new_refs = source.list(KEY), target.list(KEY)
    assert new_refs == old_refs  # ids, names, kinds, times, sizes: all preserved
    assert [r.id for r in refs] == [r.id for r in reversed(old_refs)]
    for ref in old_refs:
        old = (source.folder(KEY) / ref.path).read_bytes()
        new = (target.folder(KEY) / ref.path).read_bytes()
        assert new == old
        assert target.read(KEY, ref.id, 0, 65536).content.encode() == old


def test_import_under_another_chat_key_and_lazy_refs_are_skipped(
    source: ContextFiles, tmp_path: Path
) -> None:
    data = source.export(KEY)
    lazy = dict(data["items"][0], id="lazy1", eager=False, path="lazy1.txt")
    data["items"].append(lazy)
    target = ContextFiles(ShipPaths(tmp_path / "new"))
    refs = target.import_("api:chat:bob", data)
    assert "lazy1" not in {r.id for r in refs}
    assert not (target.folder("api:chat:bob") / "lazy1.txt").exists()
    assert len(target.list("api:chat:bob")) == 3 and target.list(KEY) == []


HOSTILE: list[tuple[str, Any]] = [
    ("absolute", "/tmp/pwned.txt"),
    ("parent", "../../../../pwned.txt"),
    ("nested parent", "sub/../../pwned.txt"),
    ("index clobber", "index.jsonl"),
    ("hidden", ".pwned"),
    ("backslash", "..\\pwned.txt"),
    ("empty", ""),
]


@pytest.mark.parametrize(("label", "bad_path"), HOSTILE, ids=[h[0] for h in HOSTILE])
@pytest.mark.parametrize("where", ["item path", "extra file"])
def test_a_hostile_export_is_refused_whole_and_writes_nothing(
    source: ContextFiles, tmp_path: Path, label: str, bad_path: str, where: str
) -> None:
    data = copy.deepcopy(source.export(KEY))
    if where == "item path":
        # A valid item first, so a writer that did not validate everything up front would write it.
        item = data["items"][1]
        data["files"][bad_path] = data["files"].pop(item["path"])
        item["path"] = bad_path
    else:
        data["files"][bad_path] = "pwned"
    target_root = tmp_path / "new"
    target_root.mkdir()
    before = _tree(tmp_path)
    with pytest.raises(BadRequestError) as err:
        ContextFiles(ShipPaths(target_root)).import_(KEY, data)
    assert repr(bad_path)[1:-1] in str(err.value) or "non-empty" in str(err.value)
    assert _tree(tmp_path) == before  # nothing written inside the project nor outside it
    assert not Path("/tmp/pwned.txt").exists()


def test_a_symlinked_chat_folder_cannot_redirect_an_import(source: ContextFiles, tmp_path: Path) -> None:
    target = ContextFiles(ShipPaths(tmp_path / "new"))
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = target.folder(KEY)
    folder.mkdir(parents=True)
    (folder / "escape").symlink_to(outside)
    data = source.export(KEY)
    data["files"]["escape/x.txt"] = "pwned"
    with pytest.raises(BadRequestError, match="outside the chat's context folder"):
        target.import_(KEY, data)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "'version' is 2"),
        (lambda d: d.update(items="nope"), "'items' must be a list"),
        (lambda d: d["items"][0].pop("kind"), r"items\[0\]: field 'kind'"),
        (lambda d: d["items"][0].update(id="../x"), r"items\[0\]: field 'id'"),
        (lambda d: d["files"].clear(), "'files' has no entry for path"),
        (lambda d: d["items"].append(dict(d["items"][0])), "duplicate id"),
    ],
)
def test_malformed_exports_name_what_is_wrong(
    source: ContextFiles, tmp_path: Path, mutate: Any, message: str
) -> None:
    data = copy.deepcopy(source.export(KEY))
    mutate(data)
    with pytest.raises(BadRequestError, match=message):
        ContextFiles(ShipPaths(tmp_path / "new")).import_(KEY, data)
    assert not (tmp_path / "new").exists()


def test_an_adopted_file_with_raw_bytes_round_trips_byte_exact(tmp_path: Path) -> None:
    """A command's raw output (not valid UTF-8) is adopted without loading it and exported base64."""
    raw = b"build ok \xff\xfe\x00 caf\xc3\xa9 \xe6\x97\xa5\n" * 1000 + "日志 🎉 end\n".encode()
    output = tmp_path / "stdout.log"
    output.write_bytes(raw)
    files = ContextFiles(ShipPaths(tmp_path / "old"))
    ref = files.add_artifact_file(KEY, output, name="stdout of make", source="tool:exec_shell", move=True)
    assert not output.exists() and ref.size_bytes == len(raw)
    assert files.tail(KEY, ref.id, 1).content == "日志 🎉 end\n"
    assert files.read(KEY, ref.id, 0, 13).content == "build ok \ufffd\ufffd\x00 "  # replaced on reading only

    data = json.loads(json.dumps(files.export(KEY)))
    assert data["binaryFiles"] == [ref.path]
    target = ContextFiles(ShipPaths(tmp_path / "new"))
    target.import_(KEY, data)
    assert (target.folder(KEY) / ref.path).read_bytes() == raw

    data["files"][ref.path] = "not base64!"
    with pytest.raises(BadRequestError, match=r"cannot be decoded"):
        ContextFiles(ShipPaths(tmp_path / "third")).import_(KEY, data)
