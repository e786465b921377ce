"""The four ``context_*`` tools, as one pydantic-ai ``FunctionToolset``.

Each tool reads the chat key and project from its run (``RunContext[TurnDeps]``), so a chat can only
ever reach its own files. Limits are enforced here, not in the JSON schema: a value out of range
is clamped and the result says so in ``notes`` (a schema violation would make the model retry
blindly). Failures — unknown id, invalid regex, missing file — come back as
``{"success": false, "error": ...}``; nothing is raised into the run.

Results are bounded (a page ≤ 64 KB, a tail ≤ 64 KB, grep output ≤ 64 KB), which is why the
spill wrapper leaves them alone: its ``no_spill`` metadata is set on this toolset. They are also
bounded in tokens: a result never exceeds a quarter of ``context.chatHistory.maxHistoryTokens``
(the size above which the request budget would cut a part in half and lose its middle), so a page
shrinks — and says so — rather than reaching the model mangled.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset

from ...errors import ShipAgentError
from ...store.files._grep import GrepMatch, InvalidPatternError
from ...store.files._ref import CONTEXT_KINDS, ContextRef
from ...store.files._store import ContextFiles
from ...store.logs import MessageLog
from ...window.tokens import count_tokens
from .._deps import TurnDeps, deps_of
from ..execution import ToolExecutionContext
from ._expand import expand_result


async def context_expand(
    ctx: RunContext[TurnDeps], summary_id: str, offset: int = 0, limit: int = 32768
) -> dict[str, Any]:
    """Return, verbatim, the messages a compaction summary replaced (its id is in the summary).

    Args:
        summary_id: the summary's id, like "S12-41" (shown in the summary text).
        offset: byte offset into the rendered messages (default 0); continue from `nextOffset`.
        limit: bytes to return (default 32768, at most 65536).
    """
    return await expand_page(deps_of(ctx), summary_id, offset, limit)


async def expand_page(deps: TurnDeps, summary_id: str, offset: int = 0, limit: int = 32768) -> dict[str, Any]:
    """:func:`context_expand` for the run of ``deps``."""
    run, source = deps.tool, deps.stores.message_log
    try:
        log = await source(run.chat_key) if source is not None else MessageLog(run.paths)
        work = partial(expand_result, log, run.chat_key, summary_id, offset, limit, token_cap(run))
        return await anyio.to_thread.run_sync(work)
    except ShipAgentError as exc:  # the shared database is unreachable: a result, not a crash
        return {"success": False, "error": str(exc)}


__all__ = ["CONTEXT_TOOL_NAMES", "NO_SPILL_METADATA", "context_files_for", "context_toolset", "expand_page"]

CONTEXT_TOOL_NAMES = frozenset(
    {"context_list", "context_read", "context_tail", "context_grep", "context_expand"}
)
NO_SPILL_METADATA: dict[str, Any] = {"shipagent_no_spill": True}
"""Tool metadata that tells :class:`SpillToolset` to pass a tool's results through untouched."""

READ_LIMIT_MAX = 65536
TAIL_LINES_MAX = 2000
TAIL_BYTES_MAX = 65536
LIST_LIMIT_MAX = 1000
GREP_RESULTS_MAX = 500
GREP_CONTEXT_MAX = 20
GREP_LINE_CHARS = 2000
GREP_OUTPUT_CHARS = 65536


def context_files_for(ctx: ToolExecutionContext) -> ContextFiles:
    """The run's :class:`ContextFiles`: ``ctx.context_files`` (made from ``ctx.paths`` if unset)."""
    if ctx.context_files is None:
        ctx.context_files = ContextFiles(ctx.paths)
    return ctx.context_files


def token_cap(ctx: ToolExecutionContext) -> int:
    """The most tokens one result may cost: under the request budget's per-part cut."""
    context = ctx.config.context
    budget = context.chat_history.max_history_tokens
    if context.budget.max_tokens is not None:
        budget = context.budget.max_tokens - context.budget.reserve_output
    cap = budget // 4
    section = context.budget.sections.tool_results
    if section is not None:  # a page must fit its section whole
        cap = min(cap, int(section * budget if section <= 1 else section))
    return max(256, cap - 256)


def _tokens(result: dict[str, Any]) -> int:
    return count_tokens(json.dumps(result, ensure_ascii=False))


def _shrunk(size: int, tokens: int, cap: int) -> int:
    """A byte size that should bring ``tokens`` under ``cap`` (with room for estimation error)."""
    return max(1, int(size * cap / tokens * 0.85))


def _clamp(name: str, value: int, low: int, high: int, notes: list[str]) -> int:
    if value < low:
        notes.append(f"{name}={value} is below the minimum; clamped to {low}")
        return low
    if value > high:
        notes.append(f"{name}={value} is above the maximum; clamped to {high}")
        return high
    return value


Work = Callable[[ContextFiles, str, int], dict[str, Any]]


async def _run(run: RunContext[TurnDeps], work: Work, *, read: str | None = None) -> dict[str, Any]:
    """Run blocking file work in a thread; turn every expected failure into a result.

    The work gets the files of the store's :meth:`~ContextFiles.session`: in a durable cluster the
    database is asked here, on the run's loop, and the thread only touches local files.
    """
    try:
        ctx = deps_of(run).tool
        async with context_files_for(ctx).session(ctx.chat_key, read=read) as files:
            result = await anyio.to_thread.run_sync(work, files, ctx.chat_key, token_cap(ctx))
    except (ShipAgentError, InvalidPatternError, OSError) as exc:
        return {"success": False, "error": str(exc)}
    return {"success": True, **result}


def _with_notes(result: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    if notes:
        result["notes"] = notes
    return result


def _ref_for_model(ref: ContextRef) -> dict[str, Any]:
    data = ref.to_json()
    data.pop("path", None)  # where it lives on disk is none of the model's business
    return data


async def context_list(run: RunContext[TurnDeps], kind: str | None = None, limit: int = 50) -> dict[str, Any]:
    """List this chat's context files (spilled tool outputs, compacted history, the catalog), newest first.

    Args:
        kind: only files of this kind: "artifact", "history" or "catalog"; omit for all.
        limit: how many to return (default 50, at most 1000).
    """
    if kind is not None and kind not in CONTEXT_KINDS:
        return {"success": False, "error": f"kind must be one of {', '.join(CONTEXT_KINDS)}; got {kind!r}"}
    notes: list[str] = []
    limit = _clamp("limit", limit, 1, LIST_LIMIT_MAX, notes)

    def work(files: ContextFiles, chat_key: str, cap: int) -> dict[str, Any]:
        refs = files.list(chat_key, kind=kind, limit=limit)  # type: ignore[arg-type]
        items = [_ref_for_model(r) for r in refs]
        while len(items) > 1 and _tokens({"items": items}) > cap:
            items = items[: len(items) // 2]
        if len(items) < len(refs):
            notes.append(f"only the newest {len(items)} of {len(refs)} fit the token budget; filter by kind")
        return _with_notes({"items": items}, notes)

    return await _run(run, work)


async def context_read(
    run: RunContext[TurnDeps], id: str, offset: int = 0, limit: int = 8192
) -> dict[str, Any]:
    """Read a page of a context file by UTF-8 byte offset. Continue from `nextOffset` until `done`.

    Args:
        id: the context file id (from context_list or a spilled-output preview).
        offset: byte offset to start at (default 0); moved back to a character boundary if needed.
        limit: bytes to read (default 8192, at most 65536).
    """
    notes: list[str] = []
    if offset < 0:
        notes.append(f"offset={offset} is negative; clamped to 0 (use context_tail to read the end)")
        offset = 0
    limit = _clamp("limit", limit, 1, READ_LIMIT_MAX, notes)

    def work(files: ContextFiles, chat_key: str, cap: int) -> dict[str, Any]:
        page = files.read(chat_key, id, offset, limit)
        shrunk = False
        for _ in range(4):
            tokens = _tokens({"content": page.content})
            if tokens <= cap:
                break
            page = files.read(chat_key, id, offset, _shrunk(page.next_offset - page.offset, tokens, cap))
            shrunk = True
        if shrunk:
            notes.append(
                f"page shortened to {page.next_offset - page.offset} bytes to fit the token budget "
                "(context.chatHistory.maxHistoryTokens / 4); continue from nextOffset"
            )
        if offset >= page.size and offset:
            notes.append(f"offset={offset} is at or past the end of the file ({page.size} bytes)")
        elif page.offset != offset:
            notes.append(
                f"offset={offset} is inside a multi-byte character; the page starts at {page.offset}"
            )
        result = {
            "id": id,
            "offset": page.offset,
            "limit": limit,
            "done": page.done,
            "content": page.content,
            "nextOffset": page.next_offset,
            "totalBytes": page.size,
        }
        return _with_notes(result, notes)

    return await _run(run, work, read=id)


async def context_tail(run: RunContext[TurnDeps], id: str, lines: int = 200) -> dict[str, Any]:
    """Read the last lines of a context file — start here when looking for an error.

    Args:
        id: the context file id.
        lines: how many lines from the end (default 200, at most 2000).
    """
    notes: list[str] = []
    lines = _clamp("lines", lines, 1, TAIL_LINES_MAX, notes)

    def work(files: ContextFiles, chat_key: str, cap: int) -> dict[str, Any]:
        max_bytes = TAIL_BYTES_MAX
        tail = files.tail(chat_key, id, lines, max_bytes=max_bytes)
        for _ in range(4):
            tokens = _tokens({"content": tail.content})
            if tokens <= cap:
                break
            max_bytes = _shrunk(len(tail.content.encode("utf-8")), tokens, cap)
            tail = files.tail(chat_key, id, lines, max_bytes=max_bytes)
        if tail.truncated:
            notes.append(
                f"the last {lines} lines exceed {max_bytes} bytes (the size or token limit); only "
                f"the lines that fit are shown, from byte {tail.start_offset} (context_read for the rest)"
            )
        result = {
            "id": id,
            "lines": tail.lines,
            "content": tail.content,
            "startOffset": tail.start_offset,
            "totalBytes": tail.size,
        }
        return _with_notes(result, notes)

    return await _run(run, work, read=id)


def _cap_line(text: str) -> str:
    if len(text) <= GREP_LINE_CHARS:
        return text
    return f"{text[:GREP_LINE_CHARS]}…[+{len(text) - GREP_LINE_CHARS} chars]"


def _match_json(match: GrepMatch, with_context: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"line": match.line, "content": _cap_line(match.content)}
    if with_context:
        out["before"] = [_cap_line(t) for t in match.before]
        out["after"] = [_cap_line(t) for t in match.after]
    return out


async def context_grep(
    run: RunContext[TurnDeps],
    id: str,
    pattern: str,
    maxResults: int = 50,
    contextLines: int = 0,
    caseSensitive: bool = False,
) -> dict[str, Any]:
    """Search a context file with a regular expression; returns matching lines with 1-based line numbers.

    Args:
        id: the context file id.
        pattern: a regular expression in RE2 syntax, matched against each line (a plain word
            works too). Lookahead, lookbehind and backreferences are not supported: search for a
            literal piece of the line instead.
        maxResults: how many matches to return (default 50, at most 500); totalMatches counts all.
        contextLines: lines of context before and after each match (default 0, at most 20).
        caseSensitive: match case exactly (default false).
    """
    notes: list[str] = []
    max_results = _clamp("maxResults", maxResults, 1, GREP_RESULTS_MAX, notes)
    context_lines = _clamp("contextLines", contextLines, 0, GREP_CONTEXT_MAX, notes)

    def work(files: ContextFiles, chat_key: str, cap: int) -> dict[str, Any]:
        found = files.grep(
            chat_key,
            id,
            pattern,
            max_results=max_results,
            context_lines=context_lines,
            case_sensitive=caseSensitive,
        )
        matches: list[dict[str, Any]] = []
        budget = GREP_OUTPUT_CHARS
        for match in found.matches:
            item = _match_json(match, context_lines > 0)
            budget -= len(item["content"]) + sum(
                len(t) for t in item.get("before", []) + item.get("after", [])
            )
            if budget < 0 and matches:
                notes.append(
                    f"output capped at ~{GREP_OUTPUT_CHARS} characters after {len(matches)} matches; "
                    "narrow the pattern or lower contextLines"
                )
                break
            matches.append(item)
        kept = len(matches)
        while len(matches) > 1 and _tokens({"matches": matches}) > cap:
            matches = matches[: len(matches) // 2]
        if len(matches) < kept:
            notes.append(f"only the first {len(matches)} matches fit the token budget; narrow the pattern")
        return _with_notes({"id": id, "totalMatches": found.total_matches, "matches": matches}, notes)

    return await _run(run, work, read=id)


_TOOLS: tuple[Callable[..., Awaitable[dict[str, Any]]], ...] = (
    context_list,
    context_read,
    context_tail,
    context_grep,
    context_expand,
)


def context_toolset() -> FunctionToolset[Any]:
    """The ``context_list`` / ``context_read`` / ``context_tail`` / ``context_grep`` toolset."""
    return FunctionToolset(
        list(_TOOLS),
        id="shipagent_context_files",
        docstring_format="google",
        require_parameter_descriptions=True,
        metadata=dict(NO_SPILL_METADATA),
    )
