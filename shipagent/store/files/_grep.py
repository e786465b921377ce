"""Regex search in one context file: ripgrep when there is one, RE2 in-process otherwise.

The pattern comes from a model, so both engines are linear-time (ripgrep's Rust regex, and RE2
through :mod:`shipagent._patterns`): no pattern can make a search backtrack for minutes. RE2 is the
gate — a pattern it refuses (a lookaround, a backreference, bad syntax) is refused before ripgrep
starts — so both accept the same patterns.

Both engines answer the same question the same way — 1-based line numbers, a line's text without
its ``\\n``, ``before``/``after`` as the N lines around each returned match (whatever those lines
are), ``total_matches`` as the number of matching lines in the whole file — so a model never sees
different results depending on the machine. The tests run both on one corpus and compare.

ripgrep is run as ``rg -n -m N`` (it stops reading after the N-th match), plus ``rg -c`` for
the total only when the first pass hit N; the RE2 engine reads raw bytes, as ripgrep does, and
skips whole 4 MB blocks in which the pattern does not occur before it looks at single lines.
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

from ..._patterns import CompiledPattern, InvalidPatternError, compile_pattern

__all__ = ["GrepEngine", "GrepMatch", "GrepResult", "InvalidPatternError", "find_ripgrep", "grep_file"]

GrepEngine = Literal["ripgrep", "re2"]
_CHUNK = 4 * 1024 * 1024
# A pattern matches a line alone as it matches that line inside a block searched with ``(?m)``,
# except with text-edge assertions or ``m`` switched off inline: those go line by line.
_NO_BLOCK_SKIP = ("\\A", "\\z")
_FLAGS_OFF_M = re.compile(r"\(\?[A-Za-z]*-[A-Za-z]*m")  # fixed and backtrack-free; scans a short string


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
    """Search ``path`` line by line for ``pattern``. Blocking: call it from a worker thread.

    Args:
        path: the file.
        pattern: a regular expression in RE2 syntax (which ripgrep's Rust regex also reads).
        max_results: how many matches to return (``total_matches`` counts them all).
        context_lines: lines of context before and after each returned match.
        case_sensitive: ``False`` folds case (Unicode-aware in both engines).
        rg: the ripgrep binary; ``None`` looks it up with :func:`find_ripgrep`.
        engine: force ``"re2"`` or ``"ripgrep"``; ``None`` prefers ripgrep when present.

    Raises:
        UnsupportedPatternError: (an :class:`InvalidPatternError`) the pattern uses a construct
            neither engine has, such as a lookbehind; the message names it.
        InvalidPatternError: the pattern is not a regular expression, or is too long.
    """
    compiled = compile_pattern(pattern, case_sensitive=case_sensitive)
    binary = None if engine == "re2" else (rg or find_ripgrep())
    if engine == "ripgrep" and binary is None:
        raise FileNotFoundError("ripgrep (rg) is not installed")
    if binary is not None:
        result = _grep_ripgrep(binary, path, pattern, max_results, context_lines, case_sensitive)
        if result is not None:
            return result
        if engine == "ripgrep":
            raise InvalidPatternError(f"ripgrep rejected the pattern {pattern!r}")
    return _grep_re2(path, compiled, max_results, context_lines)


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
    """Run ripgrep; ``None`` when it rejects the pattern (the caller falls back to RE2).

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


# --- RE2, in-process --------------------------------------------------------------------------


def _grep_re2(path: Path, pattern: CompiledPattern, max_results: int, context_lines: int) -> GrepResult:
    """Whole 4 MB blocks at a time: RE2 finds the candidate lines, each is then checked alone.

    Only lines where the block search hits are looked at one by one (searching every line
    through the binding's per-call overhead would cost more than the search itself); the lines
    around a returned match come from the block's split, or from the previous or next block.
    """
    finder = compile_pattern(pattern.source, case_sensitive=pattern.case_sensitive, multiline=True)
    can_skip = not any(token in pattern.source for token in _NO_BLOCK_SKIP)
    can_skip = can_skip and _FLAGS_OFF_M.search(pattern.source) is None
    matches: list[GrepMatch] = []
    pending: list[tuple[int, bytes, list[bytes], list[bytes]]] = []  # returned matches awaiting after-lines
    recent: deque[bytes] = deque(maxlen=context_lines or 1)
    total = 0
    line_no = 0  # lines before this block
    for chunk in _chunks(path):
        collecting = len(matches) + len(pending) < max_results
        if not collecting and not pending and can_skip:  # only counting now: no split needed
            total += sum(
                1 for _, start, end in _candidates(chunk, finder) if pattern.search_bytes(chunk[start:end])
            )
            line_no += chunk.count(b"\n") + 1
            continue
        if can_skip and not pending and finder.find(chunk) is None:
            line_no += chunk.count(b"\n") + 1
            if context_lines:
                recent.extend(chunk.rsplit(b"\n", context_lines)[-context_lines:])
            continue
        lines = chunk.split(b"\n")
        for entry in pending:  # matches of the previous block get their after-lines from this one
            entry[3].extend(lines[: context_lines - len(entry[3])])
        matches.extend(_match(*entry) for entry in pending if len(entry[3]) >= context_lines)
        pending = [entry for entry in pending if len(entry[3]) < context_lines]
        indexes = (i for i, _, _ in _candidates(chunk, finder)) if can_skip else iter(range(len(lines)))
        for i in indexes:
            if not pattern.search_bytes(lines[i]):
                continue
            total += 1
            if len(matches) + len(pending) >= max_results:
                continue
            before = lines[max(0, i - context_lines) : i]
            if len(before) < context_lines:
                before = [*recent, *before][-context_lines:]
            after = lines[i + 1 : i + 1 + context_lines]
            entry = (line_no + i + 1, lines[i], before, after)
            if len(after) >= context_lines:
                matches.append(_match(*entry))
            else:
                pending.append(entry)
        if context_lines:
            recent.extend(lines[-context_lines:])
        line_no += len(lines)
    matches.extend(_match(*entry) for entry in pending)  # end of file cut their context
    matches.sort(key=lambda m: m.line)
    return GrepResult(total, matches, "re2")


def _match(line: int, raw: bytes, before: list[bytes], after: list[bytes]) -> GrepMatch:
    """A match with its lines decoded as ripgrep's are shown (invalid UTF-8 as U+FFFD)."""

    def text(data: bytes) -> str:
        return data.decode("utf-8", errors="replace")

    return GrepMatch(line, text(raw), [text(b) for b in before], [text(a) for a in after])


def _candidates(chunk: bytes, finder: CompiledPattern) -> Iterator[tuple[int, int, int]]:
    """``(line index, start, end)`` of each line of ``chunk`` where ``finder`` (``(?m)``) hits.

    Complete: a line that matches on its own also holds a ``finder`` match, and after each hit the
    search restarts at the next line, so a hit spanning lines never hides a later line's match.
    Each line is yielded once, in order; the caller checks it alone (a bare ^ only matches at a
    real start, a hit spanning lines may not match any single one).
    """
    pos, index, counted_to, size = 0, 0, 0, len(chunk)
    while pos <= size:
        hit = finder.find(chunk, pos)
        if hit is None:
            return
        start = chunk.rfind(b"\n", 0, hit) + 1
        index += chunk.count(b"\n", counted_to, start)
        counted_to = start
        end = chunk.find(b"\n", hit)
        end = size if end == -1 else end
        yield index, start, end
        pos = end + 1


def _chunks(path: Path) -> Iterator[bytes]:
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
            yield data[:cut]
        if carry:
            yield carry
