"""context grep: ripgrep and the in-process RE2 engine give the same answer, and that answer is right.

Every case runs three ways — ripgrep, RE2, and a naive reference written here from the
definition (1-based lines, N lines of context on each side, matching lines counted) — and all three
must agree exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shipagent._patterns import InvalidPatternError, UnsupportedPatternError
from shipagent.chatkeys import ShipPaths
from shipagent.store.files import _grep as grep_module
from shipagent.store.files._grep import GrepMatch, find_ripgrep, grep_file
from shipagent.tools.files import ContextFiles

RG = find_ripgrep()
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")

CORPUS = (
    "第一行 INFO 启动 server\n"
    "ERROR: 连接失败 🎉 code=500\n"
    "\n"
    "error lowercase café\n"
    "Warning: naïve retry 2/3\r\n"
    "  trace at foo.py:12\n"
    "ÉCOLE Straße ß STRASSE\n"
    "done 🚀 ok\n"
    "ERROR again at line 9\n"
    "last line without newline Error"
)


def _reference(
    text: str, pattern: str, *, max_results: int, context: int, case: bool
) -> tuple[int, list[GrepMatch]]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    rx = re.compile(pattern, 0 if case else re.IGNORECASE)
    hits = [i for i, line in enumerate(lines) if rx.search(line)]
    matches = [
        GrepMatch(i + 1, lines[i], lines[max(0, i - context) : i], lines[i + 1 : i + 1 + context])
        for i in hits[:max_results]
    ]
    return len(hits), matches


CASES = [
    ("error", 50, 0, False),
    ("error", 50, 0, True),
    ("ERROR", 2, 1, True),  # maxResults hit: total comes from a second counting pass
    (r"\d+", 3, 2, False),
    ("^$", 50, 1, False),  # the empty line, not a phantom line after the final newline
    ("连接|🚀", 50, 3, False),
    ("straße", 50, 0, False),
    ("naïve.*3$", 50, 0, False),  # "3\r": $ does not match before \r in either engine
    ("newline Error$", 50, 2, True),  # last line, no final newline
    ("", 4, 0, False),  # matches every line
    ("nothing-matches-this", 50, 2, False),
    ("^\ufeff?第一行", 50, 0, False),  # a leading BOM is text like any other, not sniffed away
]


@pytest.mark.parametrize("engine", ["re2", pytest.param("ripgrep", marks=needs_rg)])
@pytest.mark.parametrize(("pattern", "max_results", "context", "case"), CASES)
@pytest.mark.parametrize("final_newline", [True, False])
def test_both_engines_give_the_reference_answer(
    tmp_path: Path, engine: str, pattern: str, max_results: int, context: int, case: bool, final_newline: bool
) -> None:
    text = CORPUS + "\n" if final_newline else CORPUS
    if pattern.startswith("^\ufeff"):
        text = "\ufeff" + text
    path = tmp_path / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    result = grep_file(
        path,
        pattern,
        max_results=max_results,
        context_lines=context,
        case_sensitive=case,
        engine=engine,  # type: ignore[arg-type]
    )
    assert result.engine == engine
    total, matches = _reference(text, pattern, max_results=max_results, context=context, case=case)
    assert (result.total_matches, result.matches) == (total, matches)


@needs_rg
def test_parity_on_a_big_file_across_python_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small blocks make the RE2 engine cross many block boundaries (skipped blocks, context
    # that spans two blocks, counting after maxResults) on a file that stays fast to build.
    monkeypatch.setattr(grep_module, "_CHUNK", 4096)
    lines = [f"{i:06d} 普通日志 entry ok" for i in range(40_000)]
    for i in (0, 4099, 4100, 20_000, 39_999):
        lines[i] = f"{i:06d} FATAL 崩溃 🎉 at step {i}"
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for pattern, max_results, context in (
        ("fatal", 50, 3),
        ("fatal", 2, 5),  # counting after maxResults visits only the lines where the pattern hits
        (r"崩溃.*step 4\d+", 50, 0),
        (r"^0399", 1, 0),  # anchored: counted line by line at every line start, not only the block's
        (r"ok\s+000|^00001\d", 1, 0),  # a hit spanning two lines must not hide the next line's own match
        (r"FATAL\s+\S+|entry ok$", 3, 0),
    ):
        py = grep_file(
            path,
            pattern,
            max_results=max_results,
            context_lines=context,
            case_sensitive=False,
            engine="re2",
        )
        rg = grep_file(
            path,
            pattern,
            max_results=max_results,
            context_lines=context,
            case_sensitive=False,
            engine="ripgrep",
        )
        assert (py.total_matches, py.matches) == (rg.total_matches, rg.matches)
    fatal = grep_file(path, "FATAL", max_results=50, context_lines=1, case_sensitive=True, engine="re2")
    assert [m.line for m in fatal.matches] == [1, 4100, 4101, 20_001, 40_000]
    assert fatal.matches[1].after == ["004100 FATAL 崩溃 🎉 at step 4100"]
    assert fatal.matches[0].before == [] and fatal.matches[-1].after == []


@pytest.mark.parametrize("engine", ["re2", pytest.param("ripgrep", marks=needs_rg)])
def test_an_invalid_regex_is_a_clear_error(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "f.txt"
    path.write_text("abc\n")
    with pytest.raises(InvalidPatternError, match=r"invalid regular expression '\(unclosed'"):
        grep_file(
            path,
            "(unclosed",
            max_results=5,
            context_lines=0,
            case_sensitive=False,
            engine=None if engine == "ripgrep" else "re2",
        )


@pytest.mark.parametrize("engine", ["re2", pytest.param("ripgrep", marks=needs_rg)])
def test_a_lookbehind_is_refused_by_name_in_either_engine(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "f.txt"
    path.write_text("foobar\nbazbar\n")
    with pytest.raises(UnsupportedPatternError, match=r"lookbehind") as caught:
        grep_file(
            path,
            "(?<=baz)bar",
            max_results=5,
            context_lines=0,
            case_sensitive=True,
            engine=engine,  # type: ignore[arg-type]
        )
    assert caught.value.construct == "a lookbehind (?<=…)"


def test_context_files_grep_without_ripgrep_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grep_module, "find_ripgrep", lambda: None)
    files = ContextFiles(ShipPaths(tmp_path))
    ref = files.add_artifact("api:chat:alice", CORPUS, name="log", source="test")
    result = files.grep("api:chat:alice", ref.id, "error", max_results=2)
    assert result.engine == "re2"
    assert result.total_matches == 4
    assert [m.line for m in result.matches] == [2, 4]
