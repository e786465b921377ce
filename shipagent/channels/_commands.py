"""The chat commands every channel understands (``/start``, ``/help``, ``/new``, ``/status``, ``/stop``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMANDS", "Command", "help_text", "parse_command"]

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
