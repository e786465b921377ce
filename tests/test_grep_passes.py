"""ripgrep's counting pass runs beside the first one and gives the total only when maxResults is hit."""

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
    reference = grep_file(
        path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="python"
    )
    spawned = _spy(monkeypatch)
    result = grep_file(path, "error", max_results=3, context_lines=1, case_sensitive=False, engine="ripgrep")
    assert [("--count" in args) for args in spawned] == [True, False]
    assert result.total_matches == reference.total_matches == 2858
    assert result.matches == reference.matches
    assert [m.line for m in result.matches] == [1, 8, 15]
