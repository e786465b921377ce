"""Every README code block marked ``<!-- runnable -->`` runs as pasted.

A marker sits on the line right before a fenced block and may carry options::

    <!-- runnable: file=ship.json setup="git init -q" model=scripted exit=1 -->

Blocks of one ``##`` section run in order in one fresh directory, as a reader would paste them:

* ``setup``: a shell command run there first (``shipagent init demo``);
* ``file``: the block is written to that file (a ``ship.json`` must then load and pass
  ``check_project`` without errors; a Python file must also execute);
* ``python`` blocks execute as ``__main__`` with that directory as the working directory
  (``model=scripted``: agents built without a model get a scripted one, as no test may call a
  real model);
* ``sh`` blocks run line by line with bash and must succeed; ``console`` blocks run their ``$``
  lines and must print every other line shown (lines with ``...`` are elided), with exit status
  ``exit`` (default 0).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

from shipagent import ShipAgent, check_project, cli, load_config

README = Path(__file__).resolve().parent.parent / "README.md"
PLAIN_SHIPAGENT = re.compile(r"^shipagent [^|&;<>$`(){}]*$")
MARKER = re.compile(r"^<!-- runnable(?::\s*(?P<opts>.*?))?\s*-->$")


@dataclass
class Block:
    section: str
    lang: str
    code: str
    options: dict[str, str]
    line: int


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


def runnable_sections(text: str) -> list[Section]:
    sections: dict[str, Section] = {}
    title = "(top)"
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            title = line[3:].strip()
        match = MARKER.match(line.strip())
        if match:
            fence = lines[i + 1]
            assert fence.startswith("```"), f"README.md:{i + 1}: a runnable marker must precede a code block"
            end = lines.index("```", i + 2)
            options = dict(opt.split("=", 1) for opt in shlex.split(match.group("opts") or ""))
            block = Block(title, fence[3:].strip(), "\n".join(lines[i + 2 : end]) + "\n", options, i + 1)
            sections.setdefault(title, Section(title)).blocks.append(block)
            i = end
        i += 1
    return list(sections.values())


SECTIONS = runnable_sections(README.read_text(encoding="utf-8"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # shipagent, mcp-server-*
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with bash; a plain ``shipagent ...`` line runs the same CLI app in this
    process (argv split like a shell does), which saves a Python start-up per line."""
    if PLAIN_SHIPAGENT.match(command):
        with contextlib.chdir(cwd):
            result = CliRunner().invoke(cli.app, shlex.split(command)[1:])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return subprocess.CompletedProcess(command, result.exit_code, result.stdout, result.stderr)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120
    )


def _run_python(block: Block, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(cwd)
    monkeypatch.syspath_prepend(str(cwd))
    if block.options.get("model") == "scripted":
        original = ShipAgent.from_project.__func__  # type: ignore[attr-defined]

        def scripted(cls: type[ShipAgent], root: Any, **kwargs: Any) -> ShipAgent:
            kwargs.setdefault(
                "model", FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("scripted")]))
            )
            return original(cls, root, **kwargs)  # type: ignore[no-any-return]

        monkeypatch.setattr(ShipAgent, "from_project", classmethod(scripted))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, f"README.md:{block.line}", "exec"), {"__name__": "__main__"})
    return out.getvalue()


def _run(block: Block, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = f"README.md:{block.line} ({block.lang})"
    if "setup" in block.options:
        done = _shell(block.options["setup"], cwd)
        assert done.returncode == 0, f"{where}: setup failed: {done.stderr}"
    if "file" in block.options:
        target = cwd / block.options["file"]
        target.write_text(block.code, encoding="utf-8")
        if block.lang == "json":
            json.loads(block.code)
        if target.name == "ship.json":
            load_config(cwd)
            errors = [p for p in check_project(cwd, include_model=False) if p.level == "error"]
            assert errors == [], f"{where}: {errors}"
        if block.lang == "python":
            _run_python(block, cwd, monkeypatch)
        return
    if block.lang == "python":
        _run_python(block, cwd, monkeypatch)
    elif block.lang == "sh":
        for command in (c for c in block.code.splitlines() if c.strip() and not c.startswith("#")):
            done = _shell(command, cwd)
            assert done.returncode == 0, f"{where}: `{command}` failed: {done.stdout}{done.stderr}"
    elif block.lang == "console":
        commands = [c[2:] for c in block.code.splitlines() if c.startswith("$ ")]
        shown = [
            c for c in block.code.splitlines() if not c.startswith("$ ") and c.strip() and "..." not in c
        ]
        done = _shell(" && ".join(commands), cwd)
        assert done.returncode == int(block.options.get("exit", "0")), f"{where}: {done.stdout}{done.stderr}"
        printed = done.stdout.splitlines()
        missing = [line for line in shown if line not in printed]
        assert missing == [], f"{where}: not printed: {missing}\nprinted:\n{done.stdout}"
    else:
        pytest.fail(f"{where}: no runner for {block.lang!r} blocks")


def test_the_readme_marks_its_runnable_blocks() -> None:
    blocks = [b for s in SECTIONS for b in s.blocks]
    assert len(blocks) >= 12
    assert {b.lang for b in blocks} >= {"python", "json", "console", "sh"}
    titles = {s.title for s in SECTIONS}
    assert {"Ten lines of Python", "MCP servers", "Hand work to other agents"} <= titles


@pytest.mark.parametrize("section", SECTIONS, ids=[s.title for s in SECTIONS])
def test_runnable_blocks_run_as_pasted(
    section: Section, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCS_TOKEN", raising=False)  # as on a reader's machine,
    monkeypatch.setenv("PATH", _env()["PATH"])  # with the virtualenv activated
    cwd = tmp_path / "work"
    cwd.mkdir()
    for block in section.blocks:
        _run(block, cwd, monkeypatch)
