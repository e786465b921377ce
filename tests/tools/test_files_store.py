"""ContextFiles: the index, paging by byte offset, tail, catalog, isolation between chat keys."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.errors import BadRequestError, NotFoundError
from shipagent.store.files import _paging
from shipagent.store.files._store import CATALOG_ID
from shipagent.tools.files import ContextFiles

KEY = "telegram:chat:42"

# Multi-byte characters everywhere: 3-byte CJK, 4-byte emoji, 2-byte accents, ASCII.
UNIT = "日志第{i}行：错误 🎉🚀 café naïve — ok\n"
CORPUS = "".join(UNIT.format(i=i) for i in range(3000))


@pytest.fixture
def files(tmp_path: Path) -> ContextFiles:
    return ContextFiles(ShipPaths(tmp_path))


def _page_through(files: ContextFiles, ref_id: str, limit: int) -> tuple[bytes, list[tuple[int, int]]]:
    out = b""
    spans = []
    offset = 0
    while True:
        page = files.read(KEY, ref_id, offset, limit)
        assert page.offset == offset, "consecutive pages continue exactly where the last stopped"
        out += page.content.encode("utf-8")
        spans.append((page.offset, page.next_offset))
        if page.done:
            return out, spans
        offset = page.next_offset


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 8192, 65536])
def test_read_pages_back_every_byte_without_splitting_characters(files: ContextFiles, limit: int) -> None:
    ref = files.add_artifact(KEY, CORPUS, name="log", source="test")
    if limit < 8:  # tiny pages over the whole corpus would be slow; a slice still crosses every width
        ref = files.add_artifact(KEY, CORPUS[:400], name="log", source="test")
    data, spans = _page_through(files, ref.id, limit)
    expected = (CORPUS if limit >= 8 else CORPUS[:400]).encode("utf-8")
    assert data == expected
    for start, end in spans:
        # Each page decodes on its own (no replacement characters), and respects the limit unless
        # a single character is wider than the limit (then exactly that one character).
        chunk = expected[start:end]
        chunk.decode("utf-8")
        assert end - start <= max(limit, 4)


def test_read_snaps_an_offset_inside_a_character_back_to_its_first_byte(files: ContextFiles) -> None:
    ref = files.add_artifact(KEY, "ab🎉cd", name="x", source="test")  # 🎉 is bytes 2..5
    for inside in (3, 4, 5):
        page = files.read(KEY, ref.id, inside, 100)
        assert page.offset == 2
        assert page.content == "🎉cd"
    page = files.read(KEY, ref.id, 0, 4)  # ends inside 🎉: stop before it
    assert (page.content, page.next_offset, page.done) == ("ab", 2, False)


def test_read_past_the_end_is_done_and_empty(files: ContextFiles) -> None:
    ref = files.add_artifact(KEY, "hello", name="x", source="test")
    page = files.read(KEY, ref.id, 999, 10)
    assert (page.content, page.done, page.offset, page.next_offset, page.size) == ("", True, 5, 5, 5)


class _CountingOpen:
    """Counts the bytes read through ``open`` in a module, to prove cost is O(page), not O(file)."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fh = builtins.open(*args, **kwargs)  # noqa: SIM115 - closed by the wrapper's __exit__
        outer = self

        class Wrapped:
            def __enter__(self) -> Wrapped:
                return self

            def __exit__(self, *exc: Any) -> None:
                fh.close()

            def read(self, n: int = -1) -> bytes:
                data = fh.read(n)
                outer.bytes_read += len(data)
                return data

            def __getattr__(self, name: str) -> Any:
                return getattr(fh, name)

        return Wrapped()


def test_read_and_tail_cost_does_not_grow_with_file_size(
    files: ContextFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = files.add_artifact(KEY, CORPUS, name="small", source="test")  # ~150 KB
    big = files.add_artifact(KEY, CORPUS * 60, name="big", source="test")  # ~9 MB
    counts = {}
    for ref in (small, big):
        counter = _CountingOpen()
        monkeypatch.setattr(_paging, "open", counter, raising=False)
        files.read(KEY, ref.id, 50_000, 8192)
        files.tail(KEY, ref.id, 200)
        counts[ref.name] = counter.bytes_read
    assert counts["big"] == counts["small"]
    assert counts["big"] < 3 * 65536


@pytest.mark.parametrize("trailing_newline", [True, False])
def test_tail_returns_the_last_lines_and_where_they_start(
    files: ContextFiles, trailing_newline: bool
) -> None:
    text = CORPUS if trailing_newline else CORPUS.rstrip("\n")
    ref = files.add_artifact(KEY, text, name="log", source="test")
    raw = text.encode("utf-8")
    for n in (1, 3, 200):
        tail = files.tail(KEY, ref.id, n)
        expected_lines = text.splitlines(keepends=True)[-n:]
        assert tail.content == "".join(expected_lines)
        assert tail.lines == n
        assert raw[tail.start_offset :] == tail.content.encode("utf-8")
        assert not tail.truncated
    whole = files.tail(KEY, ref.id, 5000, max_bytes=len(raw))
    assert (whole.content, whole.lines, whole.start_offset, whole.truncated) == (text, 3000, 0, False)
    capped = files.tail(KEY, ref.id, 5000, max_bytes=1000)
    assert capped.truncated
    assert capped.content == "".join(text.splitlines(keepends=True)[-capped.lines :])  # whole lines only
    assert len(capped.content.encode()) <= 1000


def test_tail_of_enormous_lines_is_capped_on_a_character_boundary(files: ContextFiles) -> None:
    ref = files.add_artifact(KEY, "开头\n" + "界" * 100_000, name="one long line", source="test")
    tail = files.tail(KEY, ref.id, 1, max_bytes=1000)
    assert tail.truncated
    assert tail.content == "界" * 333  # 999 bytes: the 1000th would split a character
    assert tail.lines == 1


def test_a_chat_key_sees_only_its_own_refs(files: ContextFiles) -> None:
    mine = files.add_artifact(KEY, "secret of 42", name="mine", source="test")
    other = files.add_artifact("telegram:chat:7", "secret of 7", name="theirs", source="test")
    assert [r.id for r in files.list(KEY)] == [mine.id]
    with pytest.raises(NotFoundError, match=f"'{other.id}' not found for this chat"):
        files.read(KEY, other.id)
    with pytest.raises(NotFoundError):
        files.read(KEY, "../../../etc/passwd")


def test_list_is_newest_first_filters_by_kind_and_limits(files: ContextFiles) -> None:
    a1 = files.add_artifact(KEY, "one", name="one", source="test")
    h1 = files.add_history(KEY, "## user · t\nhi\n", name="chat")
    a2 = files.add_artifact(KEY, "two", name="two", source="test")
    assert [r.id for r in files.list(KEY)] == [a2.id, h1.id, a1.id]
    assert [r.id for r in files.list(KEY, kind="artifact")] == [a2.id, a1.id]
    assert [r.id for r in files.list(KEY, limit=1)] == [a2.id]
    assert len({a1.id, h1.id, a2.id}) == 3
    assert (a1.kind, h1.kind, h1.mime) == ("artifact", "history", "text/markdown")


def test_refs_and_files_on_disk_are_what_the_index_says(files: ContextFiles, tmp_path: Path) -> None:
    ref = files.add_artifact(KEY, "日志🎉", name="log", source="tool:exec_shell", description="full stdout")
    folder = tmp_path / ".ship" / "context" / "telegram%3Achat%3A42"
    assert (folder / ref.path).read_bytes() == "日志🎉".encode()
    line = json.loads((folder / "index.jsonl").read_text("utf-8"))
    assert line == {
        "id": ref.id,
        "kind": "artifact",
        "name": "log",
        "description": "full stdout",
        "sizeBytes": 10,
        "createdAt": ref.created_at,
        "mime": "text/plain",
        "eager": True,
        "source": "tool:exec_shell",
        "path": f"{ref.id}.txt",
    }


def test_another_instance_sees_new_refs_and_a_torn_index_line_is_skipped(
    files: ContextFiles, tmp_path: Path
) -> None:
    first = files.add_artifact(KEY, "first", name="1", source="test")
    index = files.folder(KEY) / "index.jsonl"
    with open(index, "ab") as fh:
        fh.write(b'{"id": "torn", "kind": "arti')  # a crash mid-append
    other = ContextFiles(ShipPaths(tmp_path))
    assert [r.id for r in other.list(KEY)] == [first.id]
    second = other.add_artifact(KEY, "second", name="2", source="test")
    assert [r.id for r in files.list(KEY)] == [second.id, first.id]
    assert files.read(KEY, second.id).content == "second"


def test_catalog_has_a_stable_id_and_is_rewritten_only_when_it_changes(files: ContextFiles) -> None:
    first = files.write_catalog(
        KEY, skills=[("deploy", "Ship a release")], tools=[("exec_shell", "Run a command")]
    )
    again = files.write_catalog(
        KEY, skills=[("deploy", "Ship a release")], tools=[("exec_shell", "Run a command")]
    )
    assert first.id == again.id == CATALOG_ID
    assert again.created_at == first.created_at  # unchanged: nothing rewritten
    assert (files.folder(KEY) / "index.jsonl").read_text("utf-8").count("\n") == 1
    changed = files.write_catalog(
        KEY, skills=[], tools=[("exec_shell", "Run a command"), ("context_read", "Page")]
    )
    assert [r.id for r in files.list(KEY, kind="catalog")] == [CATALOG_ID]
    text = files.read(KEY, CATALOG_ID).content
    assert text == (
        "# Capability catalog\n\n## Skills\n(none)\n\n## Tools\n- exec_shell: Run a command\n- context_read: Page\n"
    )
    assert changed.size_bytes == len(text.encode())


def test_a_tampered_index_path_never_leaves_the_folder(files: ContextFiles, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("do not read me")
    ref = files.add_artifact(KEY, "x", name="x", source="test")
    index = files.folder(KEY) / "index.jsonl"
    evil = ref.to_json() | {"id": "evil", "path": "../../../outside.txt"}
    with open(index, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(evil) + "\n")
    with pytest.raises(BadRequestError, match=r"contains '\.\.'"):
        files.read(KEY, "evil")
