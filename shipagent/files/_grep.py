"""Regex search in one context file: ripgrep when there is one, pure Python otherwise.

Both engines answer the same question the same way — 1-based line numbers, a line's text without
its ``\\n``, ``before``/``after`` as the N lines around each returned match (whatever those lines
are), ``total_matches`` as the number of matching lines in the whole file — so a model never sees
different results depending on the machine. The tests run both on one corpus and compare.

ripgrep is run as ``rg -n -m N`` (it stops reading after the N-th match), plus ``rg -c`` for
the total only when the first pass hit N; the Python engine skips whole 4 MB blocks in which the
pattern does not occur before it looks at single lines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["GrepEngine", "GrepMatch", "GrepResult", "InvalidPatternError", "find_ripgrep", "grep_file"]

GrepEngine = Literal["ripgrep", "python"]
_CHUNK = 4 * 1024 * 1024
# Python's ``re`` and ripgrep's regex agree on a line and on the same line inside a block, except
# for these (string-edge and look-around assertions): with them the Python engine goes line by line.
_NO_BLOCK_SKIP = ("\\A", "\\Z", "\\z", "(?=", "(?!", "(?<=", "(?<!")


class InvalidPatternError(ValueError):
    """The pattern is not a valid regular expression (for either engine)."""


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line and the lines around it (empty lists when no context was asked for)."""

    line: int
    content: str
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GrepResult:
    """The first ``max_results`` matches, the number of matching lines, and who found them."""

    total_matches: int
    matches: list[GrepMatch]
    engine: GrepEngine


def find_ripgrep() -> str | None:
    """The ``rg`` binary to use: on ``PATH``, else next to this Python (``pip install ripgrep``)."""
    found = shutil.which("rg")
    if found:
        return found
    for folder in {sysconfig.get_path("scripts"), os.path.dirname(sys.executable)}:
        candidate = shutil.which("rg", path=folder)
        if candidate:
            return candidate
    return None


def grep_file(
    path: Path,
    pattern: str,
    *,
    max_results: int,
    context_lines: int,
    case_sensitive: bool,
    rg: str | None = None,
    engine: GrepEngine | None = None,
) -> GrepResult:
    """Search ``path`` line by line for ``pattern``.

    Args:
        path: the file.
        pattern: a regular expression (the common subset of Python ``re`` and Rust regex).
        max_results: how many matches to return (``total_matches`` counts them all).
        context_lines: lines of context before and after each returned match.
        case_sensitive: ``False`` folds case (Unicode-aware in both engines).
        rg: the ripgrep binary; ``None`` looks it up with :func:`find_ripgrep`.
        engine: force ``"python"`` or ``"ripgrep"``; ``None`` prefers ripgrep when present.

    Raises:
        InvalidPatternError: the pattern compiles in neither engine available.
    """
    compiled: re.Pattern[str] | None
    try:
        compiled = re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
        python_error = None
    except re.error as exc:
        compiled, python_error = None, str(exc)
    binary = None if engine == "python" else (rg or find_ripgrep())
    if engine == "ripgrep" and binary is None:
        raise FileNotFoundError("ripgrep (rg) is not installed")
    if binary is not None:
        result = _grep_ripgrep(binary, path, pattern, max_results, context_lines, case_sensitive)
        if result is not None:
            return result
        if engine == "ripgrep":
            raise InvalidPatternError(f"ripgrep rejected the pattern {pattern!r}")
    if compiled is None:
        raise InvalidPatternError(f"invalid regular expression {pattern!r}: {python_error}")
    return _grep_python(path, compiled, max_results, context_lines)


# --- ripgrep ------------------------------------------------------------------------------------


def _rg_base(binary: str, pattern: str, case_sensitive: bool) -> list[str]:
    return [
        binary,
        "--no-config",
        "--text",  # a NUL byte must not turn the file into "binary, skipped"
        "--encoding=none",  # raw bytes, no BOM sniffing or transcoding (as Python reads them; and fast)
        "--case-sensitive" if case_sensitive else "--ignore-case",
        "--regexp",
        pattern,
    ]


def _grep_ripgrep(
    binary: str, path: Path, pattern: str, max_results: int, context_lines: int, case_sensitive: bool
) -> GrepResult | None:
    """Run ripgrep; ``None`` when it rejects the pattern (the caller falls back to Python).

    ``rg -n -m N`` stops reading after the N-th match; the total then comes from ``rg --count``
    (no line numbers, no output: ripgrep's fastest full pass), which is started at the same time
    so the two run side by side instead of one after the other (the first pass alone costs ~5 ms
    of a 25 ms search on 210 MB). When the first pass ends below N matches its count is the total
    and the counting process is stopped.

    The first pass prints ripgrep's plain ``<line>:<text>`` (match) / ``<line>-<text>`` (context)
    lines rather than ``--json``: the same facts, cheaper for ripgrep to print and for Python to
    read (one regex match per line instead of a JSON document, no base64 for non-UTF-8 lines).
    """
    args = [
        *_rg_base(binary, pattern, case_sensitive),
        "--line-number",
        "--no-heading",
        "--no-filename",
        "--color=never",
        f"--max-count={max_results}",
    ]
    if context_lines:
        args.append(f"--context={context_lines}")
    seen: dict[int, bytes] = {}
    match_lines: list[int] = []
    counter = subprocess.Popen(
        [*_rg_base(binary, pattern, case_sensitive), "--count", "--", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        with subprocess.Popen(
            [*args, "--", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        ) as proc:
            assert proc.stdout is not None
            head = b""
            while chunk := os.read(proc.stdout.fileno(), _READ):
                lines = (head + chunk).split(b"\n")
                head = lines.pop()
                _collect(lines, seen, match_lines, max_results)
            _collect([head], seen, match_lines, max_results)
        if proc.returncode == 2:
            return None
        total = len(match_lines)
        if total >= max_results:  # ripgrep stopped early: the counting pass has the total
            out, _ = counter.communicate()
            total = int(out.strip() or 0)
    finally:
        if counter.returncode is None:  # not needed (fewer matches, a rejected pattern, an error)
            counter.kill()
            counter.communicate()
    text = {n: raw.decode("utf-8", errors="replace") for n, raw in seen.items()}
    matches = [
        GrepMatch(
            line=n,
            content=text[n],
            before=[text[i] for i in range(max(1, n - context_lines), n) if i in text],
            after=[text[i] for i in range(n + 1, n + 1 + context_lines) if i in text],
        )
        for n in match_lines
    ]
    return GrepResult(total, matches, "ripgrep")


# ``<line number>:<text>`` for a matching line, ``<line number>-<text>`` for a context line; the
# ``--`` between context groups (and anything else) has no leading digits and is skipped.
_RG_LINE = re.compile(rb"(\d+)([:-])")


def _collect(lines: list[bytes], seen: dict[int, bytes], match_lines: list[int], max_results: int) -> None:
    """Parse ``rg -n`` match and context lines into ``seen`` (raw bytes) and ``match_lines``."""
    for raw in lines:
        found = _RG_LINE.match(raw)
        if found is None:
            continue
        number = int(found[1])
        seen[number] = raw[found.end() :]
        if found[2] == b":" and len(match_lines) < max_results:
            match_lines.append(number)


_READ = 1 << 16


# --- pure Python --------------------------------------------------------------------------------


def _grep_python(path: Path, pattern: re.Pattern[str], max_results: int, context_lines: int) -> GrepResult:
    block_skip = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)
    can_skip = not any(token in pattern.pattern for token in _NO_BLOCK_SKIP)
    matches: list[GrepMatch] = []
    pending: list[tuple[int, str, list[str], list[str]]] = []  # returned matches awaiting after-lines
    recent: deque[str] = deque(maxlen=context_lines or 1)
    total = 0
    line_no = 0
    for chunk in _chunks(path):
        lines = chunk.split("\n")
        collecting = len(matches) + len(pending) < max_results
        if can_skip and not pending and block_skip.search(chunk) is None:
            line_no += len(lines)
            if context_lines:
                recent.extend(lines[-context_lines:])
            continue
        if not collecting and not pending:  # only counting now
            if can_skip:
                total += _count_matching_lines(chunk, pattern, block_skip)
            else:
                total += sum(1 for text in lines if pattern.search(text))
            line_no += len(lines)
            continue
        for text in lines:
            line_no += 1
            if pending:
                for entry in pending:
                    entry[3].append(text)
                while pending and len(pending[0][3]) >= context_lines:
                    number, content, before, after = pending.pop(0)
                    matches.append(GrepMatch(number, content, before, after))
            if pattern.search(text):
                total += 1
                if len(matches) + len(pending) < max_results:
                    before = list(recent) if context_lines else []
                    if context_lines:
                        pending.append((line_no, text, before, []))
                    else:
                        matches.append(GrepMatch(line_no, text))
            if context_lines:
                recent.append(text)
    matches.extend(GrepMatch(n, c, b, a) for n, c, b, a in pending)  # end of file cut their context
    matches.sort(key=lambda m: m.line)
    return GrepResult(total, matches, "python")


def _count_matching_lines(chunk: str, pattern: re.Pattern[str], finder: re.Pattern[str]) -> int:
    """Matching lines of ``chunk``, visiting only lines where ``finder`` (``pattern`` + MULTILINE) hits.

    Complete: a line that matches on its own also holds a ``finder`` match, and after each hit the
    search restarts at the next line, so a hit spanning lines never hides a later line's match.
    """
    count = 0
    pos = 0
    size = len(chunk)
    while pos <= size:
        hit = finder.search(chunk, pos)
        if hit is None:
            break
        start = chunk.rfind("\n", 0, hit.start()) + 1
        end = chunk.find("\n", hit.start())
        end = size if end == -1 else end
        if pattern.search(chunk[start:end]):  # sliced: a bare ^ only matches at a real start
            count += 1
        pos = end + 1
    return count


def _chunks(path: Path) -> Iterator[str]:
    """Whole lines of a file, ~4 MB at a time, joined by ``\n``, without the file's final newline."""
    with open(path, "rb") as fh:
        carry = b""
        while True:
            block = fh.read(_CHUNK)
            if not block:
                break
            data = carry + block
            cut = data.rfind(b"\n")
            if cut == -1:
                carry = data
                continue
            carry = data[cut + 1 :]
            yield data[:cut].decode("utf-8", errors="replace")
        if carry:
            yield carry.decode("utf-8", errors="replace")
