"""Every code block of the README and of ``docs/**/*.md`` runs as pasted, or says why it does not.

Each fenced block is preceded, on the line right before it, by one marker:

* ``<!-- runnable -->``, optionally with options::

      <!-- runnable: file=ship.json setup="git init -q" model=scripted exit=1 env=DATABASE_URL=postgres -->

  The block is run by this test. Blocks of one ``##`` section of one file run in order in one
  fresh directory, as a reader would paste them:

  * ``setup``: a shell command run there first (``shipagent init demo``);
  * ``file``: the block is written to that file (a ``ship.json`` must then load and pass
    ``check_project`` without errors; a Python file must also execute);
  * ``python`` blocks execute as ``__main__`` with that directory as the working directory
    (``model=scripted``: agents built without a model get a scripted one, as no test may call a
    real model);
  * ``env=NAME=postgres``: ``NAME`` is set to the URL of a fresh, empty Postgres database;
  * ``sh`` blocks run line by line with bash and must succeed; ``console`` blocks run their ``$``
    lines and must print every other line shown (lines with ``...`` are elided), with exit status
    ``exit`` (default 0).

* ``<!-- fragment: WHY -->``: a piece of something larger (a key of ship.json, an excerpt of a
  program). Not run.
* ``<!-- manual: WHY -->``: complete, but it needs what a test may not use (a real model, your
  shell's environment, ``sudo``, a machine of a cluster). Not run.

The documentation site shows the reason of a ``fragment`` or ``manual`` block as the block's
title, so a reader sees it; on GitHub the README's prose says so. Blocks in ``text`` are output a
command prints, not code, and need no marker. A Python block with a top-level ``await`` must
not be ``runnable`` (wrap it in ``asyncio.run``), and its marker must say it needs ``python -m
asyncio``.

Expected output never pins a dependency's exception text (see ``LIBRARY_PHRASES``): a library's
wording changes with its version and the machine, ours is what the documentation promises.
"""

from __future__ import annotations

import ast
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

from shipagent import ShipAgent, check_project, load_config
from shipagent.hosts.cli import _app as cli
from tests.support.paths import ROOT
from tests.support.postgres import fresh_database

DOCUMENTS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)]
PLAIN_SHIPAGENT = re.compile(r"^shipagent [^|&;<>$`(){}]*$")
MARKER = re.compile(r"^<!-- (?P<kind>runnable|fragment|manual)(?::\s*(?P<opts>.*?))?\s*-->$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)")
# Phrases of httpx, httpcore, anyio, the mcp SDK, pydantic and the OS that a user-facing line of
# ours never contains; an expected output showing one pins a dependency's wording.
LIBRARY_PHRASES = [
    "All connection attempts failed",
    "Connect call failed",
    "Client failed to connect",
    "Connection refused",
    "[Errno",
    "validation error for",
    "Input should be",
    "Field required",
    "[type=",
    "For further information visit https://errors.pydantic.dev",
    "Traceback (most recent call last)",
    "httpx.",
    "httpcore.",
    "McpError",
]


@dataclass
class Block:
    document: str
    section: str
    lang: str
    code: str
    kind: str  # runnable, fragment, manual, or "" when unmarked
    options: dict[str, str]
    reason: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line} ({self.lang})"


@dataclass
class Section:
    id: str
    blocks: list[Block] = field(default_factory=list)


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of one Markdown file, with the marker on the line before it."""
    name = path.relative_to(root).as_posix()
    found: list[Block] = []
    title = "(top)"
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            title = line[3:].strip()
        fence = FENCE.match(line)
        if fence:
            indent = fence.group("indent")
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            code = "\n".join(row[len(indent) :] for row in lines[i + 1 : end]) + "\n"
            marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
            kind = marker.group("kind") if marker else ""
            opts = (marker.group("opts") or "") if marker else ""
            options = dict(opt.split("=", 1) for opt in shlex.split(opts)) if kind == "runnable" else {}
            found.append(Block(name, title, fence.group("lang"), code, kind, options, opts, i + 2))
            i = end
        i += 1
    return found


ALL_BLOCKS = [b for path in DOCUMENTS for b in blocks_of(path)]


def runnable_sections() -> list[Section]:
    sections: dict[str, Section] = {}
    for block in ALL_BLOCKS:
        if block.kind == "runnable":
            key = f"{block.document}#{block.section}"
            sections.setdefault(key, Section(key)).blocks.append(block)
    return list(sections.values())


SECTIONS = runnable_sections()


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


def _has_top_level_await(code: str) -> bool:
    try:
        compile(code, "<block>", "exec", flags=ast.PyCF_ONLY_AST)
    except SyntaxError:
        try:
            compile(code, "<block>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            return False
        return True
    return False


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
        exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
    return out.getvalue()


def _run(block: Block, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = block.where
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


def test_every_block_is_runnable_or_says_why_not() -> None:
    unmarked = [b.where for b in ALL_BLOCKS if not b.kind and b.lang != "text"]
    assert unmarked == [], "mark each as <!-- runnable -->, <!-- fragment: why --> or <!-- manual: why -->"
    unexplained = [b.where for b in ALL_BLOCKS if b.kind in ("fragment", "manual") and not b.reason]
    assert unexplained == [], "a fragment or manual block says why it is not run"
    unknown = [
        f"{b.where}: {set(b.options) - {'file', 'setup', 'model', 'exit', 'env'}}"
        for b in ALL_BLOCKS
        if set(b.options) - {"file", "setup", "model", "exit", "env"}
    ]
    assert unknown == []


def test_top_level_await_blocks_say_they_need_an_event_loop() -> None:
    awaiting = [b for b in ALL_BLOCKS if b.lang == "python" and _has_top_level_await(b.code)]
    runnable = [b.where for b in awaiting if b.kind == "runnable"]
    assert runnable == [], "wrap the block in asyncio.run(...) to run it as pasted"
    silent = [b.where for b in awaiting if "python -m asyncio" not in b.reason]
    assert silent == [], "say in the marker that the block needs `python -m asyncio`"


def test_no_block_expects_a_library_s_exception_text() -> None:
    pinned = [f"{b.where}: {phrase!r}" for b in ALL_BLOCKS for phrase in LIBRARY_PHRASES if phrase in b.code]
    assert pinned == []


def test_the_library_phrase_check_sees_a_pinned_message(tmp_path: Path) -> None:
    """The check above is not vacuous: a block printing httpx's text is caught."""
    page = tmp_path / "page.md"
    page.write_text(
        "## MCP\n\n<!-- runnable -->\n```console\n$ shipagent mcp list\n"
        "  reason: Client failed to connect: All connection attempts failed\n```\n",
        encoding="utf-8",
    )
    found = blocks_of(page, tmp_path)
    assert [b.kind for b in found] == ["runnable"]
    assert any(phrase in found[0].code for phrase in LIBRARY_PHRASES)


def test_the_documents_mark_their_runnable_blocks() -> None:
    blocks = [b for s in SECTIONS for b in s.blocks]
    assert len(blocks) >= 20
    assert {b.lang for b in blocks} >= {"python", "json", "console", "sh"}
    documents = {b.document for b in blocks}
    assert "README.md" in documents and len(documents) >= 8


@pytest.mark.parametrize("section", SECTIONS, ids=[s.id for s in SECTIONS])
def test_runnable_blocks_run_as_pasted(
    section: Section, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.delenv("DOCS_TOKEN", raising=False)  # as on a reader's machine,
    monkeypatch.setenv("PATH", _env()["PATH"])  # with the virtualenv activated
    cwd = tmp_path / "work"
    cwd.mkdir()
    with contextlib.ExitStack() as stack:
        for block in section.blocks:
            if "env" in block.options:
                name, _, what = block.options["env"].partition("=")
                assert what == "postgres", f"{block.where}: env supports NAME=postgres"
                server = request.getfixturevalue("postgres_server")
                monkeypatch.setenv(name, stack.enter_context(fresh_database(server)))
            _run(block, cwd, monkeypatch)
