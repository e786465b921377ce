"""ripgrep answers a grep in one pass; a flood of matches falls back to a counting pass."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from shipagent.files import _grep as grep_module
from shipagent.files import find_ripgrep, grep_file

needs_rg = pytest.mark.skipif(find_ripgrep() is None, reason="ripgrep not installed")


def _log(path: Path) -> Path:
    lines = [f"{i:05d} {'ERROR disk full' if i % 7 == 0 else 'ok'}" for i in range(20_000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@needs_rg
def test_total_and_first_matches_come_from_one_ripgrep_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _log(tmp_path / "app.log")
    reference = grep_file(
        path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="python"
    )
    spawned: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(args: list[str], **kwargs: Any) -> Any:
        spawned.append(args)
        return real_popen(args, **kwargs)

    def no_second_pass(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a second ripgrep pass ran: {args}")

    monkeypatch.setattr(grep_module.subprocess, "Popen", popen)
    monkeypatch.setattr(grep_module.subprocess, "run", no_second_pass)
    result = grep_file(path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="ripgrep")
    assert len(spawned) == 1
    assert result.total_matches == reference.total_matches == 2858
    assert result.matches == reference.matches
    assert [m.line for m in result.matches] == [1, 8, 15]
    assert result.matches[1].before == ["00006 ok"] and result.matches[1].after == ["00008 ok"]


@needs_rg
def test_a_flood_of_matches_is_counted_by_a_second_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _log(tmp_path / "app.log")
    monkeypatch.setattr(grep_module, "_SKIM_LIMIT", 1024)  # any stream past the kept matches is "huge"
    monkeypatch.setattr(grep_module, "_READ", 4096)
    result = grep_file(path, r"\d+ ok", max_results=2, context_lines=0, case_sensitive=True, engine="ripgrep")
    reference = grep_file(
        path, r"\d+ ok", max_results=2, context_lines=0, case_sensitive=True, engine="python"
    )
    assert result.total_matches == reference.total_matches == 20_000 - 2858
    assert result.matches == reference.matches
