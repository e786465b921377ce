"""ripgrep's counting pass runs beside the first one and gives the total only when maxResults is hit."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from shipagent.store.files import _grep as grep_module
from shipagent.store.files._grep import find_ripgrep, grep_file

needs_rg = pytest.mark.skipif(find_ripgrep() is None, reason="ripgrep not installed")


def _log(path: Path) -> Path:
    lines = [f"{i:05d} {'ERROR disk full' if i % 7 == 0 else 'ok'}" for i in range(20_000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    spawned: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> Any:
        spawned.append(args)
        return real_popen(args, **kwargs)

    monkeypatch.setattr(grep_module.subprocess, "Popen", popen)
    return spawned


@needs_rg
def test_below_max_results_the_first_pass_has_the_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _log(tmp_path / "app.log")
    spawned = _spy(monkeypatch)
    result = grep_file(
        path, "^0000[07] ", max_results=5, context_lines=1, case_sensitive=True, engine="ripgrep"
    )
    assert [("--count" in args) for args in spawned] == [True, False]  # the counter starts first
    assert result.total_matches == 2 and [m.line for m in result.matches] == [1, 8]
    assert result.matches[1].before == ["00006 ok"] and result.matches[1].after == ["00008 ok"]


@needs_rg
def test_reaching_max_results_takes_the_total_from_the_counting_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _log(tmp_path / "app.log")
    reference = grep_file(path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="re2")
    spawned = _spy(monkeypatch)
    result = grep_file(path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="ripgrep")
    assert [("--count" in args) for args in spawned] == [True, False]
    assert result.total_matches == reference.total_matches == 2858
    assert result.matches == reference.matches
    assert [m.line for m in result.matches] == [1, 8, 15]


@needs_rg
@pytest.mark.parametrize("context_lines", [0, 1, 2])
@pytest.mark.parametrize("max_results", [2, 50])
def test_ripgrep_output_is_read_byte_exact(tmp_path: Path, context_lines: int, max_results: int) -> None:
    """Invalid UTF-8, a NUL, a CR, text that looks like ripgrep's own ``12:``/``3-``/``--``."""
    path = tmp_path / "odd.log"
    path.write_bytes(
        b"ok 1\nbad \xff\xfe bytes error\nnul \x00 error here\n12:looks-like-rg error\n--\n3-ctx\n"
        b"error\r\nend error"
    )
    ours = grep_file(
        path,
        "error",
        max_results=max_results,
        context_lines=context_lines,
        case_sensitive=False,
        engine="ripgrep",
    )
    reference = grep_file(
        path,
        "error",
        max_results=max_results,
        context_lines=context_lines,
        case_sensitive=False,
        engine="re2",
    )
    assert ours.engine == "ripgrep" and ours.total_matches == reference.total_matches == 5
    assert ours.matches == reference.matches
    assert ours.matches[0].content == "bad \ufffd\ufffd bytes error"
    if context_lines and max_results > 2:
        assert ours.matches[2].before[-1:] == ["nul \x00 error here"]
        assert ours.matches[3].before[-1:] == ["3-ctx"] and ours.matches[3].content == "error\r"
