"""The chat commands every channel understands (``/start``, ``/help``, ``/new``, ``/status``, ``/stop``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import anyio.to_thread

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ._types import ChannelHealth

__all__ = ["COMMANDS", "Command", "help_text", "parse_command", "status_text"]

COMMANDS: dict[str, str] = {
    "start": "Say hello and show what the bot can do",
    "help": "List the commands",
    "new": "Start afresh: empty the model's context (the transcript is kept)",
    "status": "Model and context use of this chat",
    "stop": "Stop the answer being written",
}
"""Command name → one-line description (what ``setMyCommands`` registers)."""

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


async def status_text(agent: ShipAgent, chat_key: str, *, running: bool, health: ChannelHealth) -> str:
    """The ``/status`` answer: the model, the chat's last request against its budget, the state."""
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
    lines.append("An answer is being written." if running else "Idle.")
    if health.undelivered:
        lines.append(f"{health.undelivered} answer(s) could not be delivered since the start.")
    return "\n".join(lines)
