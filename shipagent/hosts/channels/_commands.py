"""The chat commands every channel understands (``/start``, ``/help``, ``/new``, ``/status``,
``/stop``, ``/pin``, ``/unpin``).

``/status`` reads only what does not grow with the chat's age: the ledger's last record (the
last request's tokens and budget), the chat's current history (its newest compaction summary
counts the compactions folded into it; loading it reads back to that summary only) and the
newest :data:`UNDELIVERED_SCAN` transcript lines (answers recorded as undelivered), and the chat's
pins (``pins.json``, a few hundred tokens at most).

``/pin <fact>`` and ``/unpin <id>`` keep a fact in every request of the chat or remove it
(:mod:`shipagent.store.pins`): what the user pins is never compacted away.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import anyio.to_thread

from ...errors import ShipAgentError
from ...store.pins import PinError, pin_lines, pins_tokens
from ...window.compaction import summary_compactions

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ._types import ChannelHealth

__all__ = [
    "COMMANDS",
    "NOTHING_RUNNING",
    "PIN_COMMANDS",
    "STOPPED",
    "UNDELIVERED_SCAN",
    "Command",
    "help_text",
    "parse_command",
    "pin_command",
    "status_text",
]

UNDELIVERED_SCAN = 200
"""How many of the newest transcript lines ``/status`` looks through for undelivered answers."""

COMMANDS: dict[str, str] = {
    "start": "Say hello and show what the bot can do",
    "help": "List the commands",
    "new": "Start afresh: empty the model's context (the transcript is kept)",
    "status": "Model and context use of this chat",
    "stop": "Stop the answer being written",
    "pin": "Keep a fact in every request of this chat: /pin <fact>",
    "unpin": "Remove a pinned fact: /unpin <id>",
}
"""Command name → one-line description (what ``setMyCommands`` registers)."""

STOPPED = "Stopped."
"""What ``/stop`` says of the turn it stopped (the failure line of that turn's reply)."""

NOTHING_RUNNING = "Nothing is running."
"""What ``/stop`` says when the chat has no turn to stop."""

PIN_COMMANDS = frozenset({"pin", "unpin"})
"""The commands that change the chat's pins (answered at once, like ``/status``)."""

_ALIASES = {"clear": "new"}


@dataclass(frozen=True, slots=True)
class Command:
    """A command in a message: its name (aliases resolved) and the text after it."""

    name: str
    argument: str


def parse_command(text: str, bot_username: str | None) -> Command | None:
    """The command ``text`` starts with, or ``None`` (also for another bot's ``/cmd@other_bot``)."""
    if not text.startswith("/"):
        return None
    head, _, rest = text[1:].partition(" ")
    name, _, addressee = head.partition("@")
    if addressee and (bot_username is None or addressee.lower() != bot_username.lower()):
        return None
    name = _ALIASES.get(name.lower(), name.lower())
    if name not in COMMANDS:
        return None
    return Command(name, rest.strip())


def help_text() -> str:
    """The ``/help`` answer."""
    lines = [f"/{name} — {description}" for name, description in COMMANDS.items()]
    return "Write to me and I answer. Commands:\n" + "\n".join(lines)


async def status_text(
    agent: ShipAgent, chat_key: str, *, running: bool, health: ChannelHealth, state: str | None = None
) -> str:
    """The ``/status`` answer: the model, the chat's last request against its budget, the chat's
    use today and this month (against ``context.budgets``), how often its context was compacted,
    answers that never arrived, the state (``state``: a durable queue's words for it)."""
    from ...store.usage import UsageFileError  # (here: this function is all budgets adds to the file)

    model = getattr(agent.model, "model_name", "?")
    records = await anyio.to_thread.run_sync(partial(agent.ledger, chat_key, last=1))
    lines = [f"Model: {model}"]
    if records:
        last = records[-1]
        budget = last.budget.get("total")
        used = last.input_tokens if last.input_tokens is not None else last.total_tokens
        lines.append(f"Last request: {used} tokens" + (f" of a {budget}-token budget" if budget else ""))
    else:
        lines.append("No model request in this chat yet.")
    try:
        lines += (await agent.usage(chat_key)).lines()
    except UsageFileError as exc:
        lines.append(f"Usage: unknown ({exc})")
    store = agent.turn_hooks.store(agent)
    history = (await store.load(chat_key)).messages
    compactions = summary_compactions(history[0]) if history else 0
    lines.append(f"Compactions since the context was last emptied: {compactions}")
    lines.extend(await _pins_status(agent, chat_key))
    page = await store.transcript_page(chat_key, None, UNDELIVERED_SCAN)
    lost = [e for e in page.entries if e.get("event") == "undelivered"]
    if lost:
        lines.append(
            f"Undelivered: {len(lost)} answer(s) among the last {UNDELIVERED_SCAN} transcript lines "
            f"(the last at {lost[-1].get('ts', '?')})."
        )
    lines.append(state or ("An answer is being written." if running else "Idle."))
    if health.undelivered:
        lines.append(f"{health.undelivered} answer(s) could not be delivered since the start.")
    return "\n".join(lines)


async def _pins_status(agent: ShipAgent, chat_key: str) -> list[str]:
    """``/status``'s pins: how many, their tokens against ``context.pins.maxTokens``, then each."""
    try:
        pins = await agent.pins(chat_key)
    except ShipAgentError as exc:  # a damaged pins.json: say so, the rest of /status stands
        return [f"Pins: unreadable ({exc})"]
    if not pins:
        return ["Pins: none (/pin <fact> keeps one in every request)"]
    limit = agent.config.context.pins.max_tokens
    return [f"Pins: {len(pins)} ({pins_tokens(pins)} of {limit} tokens)", pin_lines(pins)]


async def pin_command(agent: ShipAgent, chat_key: str, command: Command) -> str:
    """The answer to ``/pin <fact>`` or ``/unpin <id>`` (without an argument: how to use it)."""
    argument = command.argument
    try:
        if argument and command.name == "pin":
            pin = await agent.pin(chat_key, argument, by="user")
            return f"Pinned {pin.id}: {pin.text}"
        if argument and await agent.unpin(chat_key, argument):
            return f"Unpinned {argument}."
        current = await agent.pins(chat_key)
    except PinError as exc:
        return f"Not pinned: {exc}"
    except ShipAgentError as exc:  # a damaged pins.json: left as it is, and said
        return f"The pins of this chat cannot be changed: {exc}"
    if argument:
        have = ", ".join(p.id for p in current) or "none"
        return f"This chat has no pin {argument!r} (its pins: {have})."
    usage = (
        "/pin <fact> keeps a fact in every request" if command.name == "pin" else "/unpin <id> removes one"
    )
    return f"{usage}. Pinned now:\n{pin_lines(current)}" if current else f"{usage}. Nothing is pinned."
