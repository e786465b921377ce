"""Assembling a run's instructions (the system prompt), in a fixed order.

1. ``Agent.md`` from the project root — the agent's role, written by the user;
2. the built-in default prompt (``shipagent/prompts/default.md``), with today's date evaluated
   per run (not frozen at start-up);
3. additions from context sources: the skills overview, context providers, the capability catalog;
4. the chat's pinned facts (:func:`pinned_facts`), last: they change only when a pin does, and a
   compaction's summary (user text after the instructions) never touches them.

Each source is a callable so subsystems plug in without this module knowing them.
"""

from __future__ import annotations

import functools
import inspect
import logging
import stat
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from .._cache import BoundedCache
from .._paths import OutsideProjectError, resolve_inside
from ..store.pins import Pin, PinsFileError, PinStore, pin_lines
from ..tools.execution import ToolExecutionContext

__all__ = [
    "InstructionSource",
    "agent_md_problem",
    "default_prompt",
    "pinned_facts",
    "pinned_section",
    "read_agent_md",
]

log = logging.getLogger("shipagent")

InstructionSource = Callable[[ToolExecutionContext], "str | Awaitable[str | None] | None"]


_agent_md_cache: BoundedCache[Path, tuple[tuple[int, int, int], str]] = BoundedCache(64)
"""A few projects per process; read from worker threads, so used under the lock."""
_agent_md_lock = threading.Lock()


def read_agent_md(project_root: Path) -> str:
    """``Agent.md`` of the project, or an empty string when there is none.

    Read again only when the file's inode, mtime or size changed: every turn asks, and one
    ``stat`` is cheaper than reading and stripping the file each time. Blocking: async callers use
    a worker thread.

    Raises:
        OutsideProjectError: ``Agent.md`` is a symlink leading out of the project (its target
            would become every chat's instructions).
    """
    path = project_root / "Agent.md"
    if not path.is_symlink() and not path.exists():
        with _agent_md_lock:
            _agent_md_cache.pop(path, None)
        return ""
    real = resolve_inside(project_root, path, "Agent.md")
    try:
        st = real.stat()
    except (FileNotFoundError, NotADirectoryError):
        with _agent_md_lock:
            _agent_md_cache.pop(path, None)
        return ""
    if not stat.S_ISREG(st.st_mode):
        return ""
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _agent_md_lock:
        cached = _agent_md_cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    text = real.read_text(encoding="utf-8").strip()
    with _agent_md_lock:
        _agent_md_cache[path] = (key, text)
    return text


def agent_md_problem(project_root: Path) -> str | None:
    """Why ``Agent.md`` would be refused (a symlink out of the project), or ``None``: for ``check``."""
    try:
        resolve_inside(project_root, project_root / "Agent.md", "Agent.md")
    except OutsideProjectError as exc:
        return str(exc)
    return None


@functools.cache
def _default_template() -> str:
    try:
        return resources.files("shipagent").joinpath("prompts/default.md").read_text(encoding="utf-8")
    except FileNotFoundError:
        return "Today's date: {date}."


def default_prompt(now: datetime | None = None) -> str:
    """The built-in default prompt with ``{date}`` replaced by today's UTC date.

    Date only, on purpose: the instructions open every request, and provider prompt
    caches (OpenAI, Anthropic, llama.cpp) reuse only an unchanged prefix. A time to the minute made
    the prefix change every minute; a date changes it once a day. A per-turn time line next to the
    user's message was the alternative; it would vary the request anyway and add a message the
    ledger must account for, for a value a tool call gives when it matters.
    """
    text = _default_template()  # a package file: read once per process
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%d (%A, UTC)")
    return text.replace("{date}", stamp).strip()


async def collect(sources: list[InstructionSource], ctx: ToolExecutionContext) -> list[str]:
    """Evaluate every source for this run, keeping non-empty texts in order."""
    out: list[str] = []
    for source in sources:
        value = source(ctx)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, str) and value.strip():
            out.append(value.strip())
    return out


def pinned_section(pins: list[Pin], *, tool: bool) -> str:
    """The "Pinned facts" block of the instructions, or ``""`` when the chat has no pins.

    A pure function of the pins (no date, no count that moves on its own), so the block stays
    byte-identical, and the provider's cached prefix with it, until a pin is added or removed.
    ``tool`` says whether the model has ``context_unpin`` to remove one.
    """
    if not pins:
        return ""
    how = " Unpin one with context_unpin when it no longer holds." if tool else ""
    return (
        "## Pinned facts\n"
        "Facts pinned in this chat; they stay in every request, however old the conversation gets."
        f"{how}\n{pin_lines(pins)}"
    )


def pinned_facts(store: PinStore, chat_key: str, *, tool: bool) -> str:
    """The chat's :func:`pinned_section`; a damaged ``pins.json`` is logged and left out.

    A damaged file fails no turn: the chat goes on without its pins until the file is fixed
    (``/status`` and ``shipagent inspect`` say what is wrong with it), and no pin is written over
    it meanwhile. Blocking (it reads ``pins.json``): the turn reads it in the same worker-thread
    hop as ``Agent.md``.
    """
    try:
        pins = store.load_sync(chat_key)
    except PinsFileError as exc:
        log.error("chat %r: its pins are left out of the request: %s", chat_key, exc)
        return ""
    return pinned_section(pins, tool=tool)
