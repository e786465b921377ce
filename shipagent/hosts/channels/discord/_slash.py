"""The chat commands as Discord application (slash) commands: registered on start, answered as text.

Why slash commands as well as text: Discord lists an application's commands when the user types
``/`` (with their descriptions and the argument ``/pin`` needs), and a slash command reaches the
bot without Message Content Intent and without a mention. The commands are the channel's own
(``/new``, ``/status``, ``/stop``, ``/pin``, ``/unpin``, ``/help``): an interaction is turned into
the same text a user would type (``/pin the deploy is on Fridays``) and goes through the same
pipeline, so access rules, pairing and the answers are those of a text command.

Global, not per guild: the commands are registered once for the application (``PUT
/applications/{id}/commands``), so they work in direct messages (where guild commands never
show) and in every server without the ``applications.commands`` scope having to be granted per
server. Discord replaces the application's whole global list on each registration: an application
that carries commands of another program should turn ``slashCommands`` off. With
``guilds.policy`` ``disabled`` they are offered in direct messages only; in a server outside
``guilds.allow`` a command is refused with a message only its user sees.
"""

from __future__ import annotations

from typing import Any

import discord
from discord import app_commands

from .._commands import COMMANDS
from .._types import InboundMessage
from ._wire import chat_key_of, place_of

__all__ = ["SLASH_COMMANDS", "command_tree", "to_command"]

SLASH_COMMANDS = ("new", "status", "stop", "pin", "unpin", "help")
"""The chat commands registered with Discord (``/start`` is Telegram's greeting, not offered here)."""

_ARGUMENT = {"pin": "fact", "unpin": "id"}  # the one text argument a command takes
_ARGUMENT_HELP = {
    "pin": "The fact to keep in every request of this chat",
    "unpin": "The pin's id (see /status)",
}


async def _answered_by_the_channel(interaction: discord.Interaction) -> None:
    """Nothing: the channel answers every command from its inbox, in order with the messages."""


async def _with_fact(interaction: discord.Interaction, fact: str) -> None:
    """Nothing: the channel reads ``fact`` from the interaction (see :func:`to_command`)."""


async def _with_id(interaction: discord.Interaction, id: str) -> None:
    """Nothing: the channel reads ``id`` from the interaction (see :func:`to_command`)."""


def command_tree(client: discord.Client, *, in_guilds: bool) -> app_commands.CommandTree[Any]:
    """The tree discord.py registers (:meth:`~discord.app_commands.CommandTree.sync`) with the
    chat commands; ``in_guilds`` false offers them in direct messages only."""
    tree: app_commands.CommandTree[Any] = app_commands.CommandTree(client)
    where = app_commands.AppCommandContext(guild=in_guilds, dm_channel=True, private_channel=False)
    callbacks = {"pin": _with_fact, "unpin": _with_id}
    for name in SLASH_COMMANDS:
        command: app_commands.Command[Any, Any, None] = app_commands.Command(
            name=name,
            description=COMMANDS[name].split(":")[0][:100],
            callback=callbacks.get(name, _answered_by_the_channel),
            allowed_contexts=where,
        )
        if name in _ARGUMENT:
            app_commands.describe(**{_ARGUMENT[name]: _ARGUMENT_HELP[name]})(command)
        tree.add_command(command)
    return tree


def to_command(interaction: discord.Interaction) -> InboundMessage | None:
    """A slash command as the message a user would have typed (``/pin <fact>``), or ``None`` (not
    one of the chat commands, or without a channel). Its message id is the interaction's."""
    data = dict(interaction.data or {})
    name = data.get("name")
    if (
        interaction.type is not discord.InteractionType.application_command
        or name not in SLASH_COMMANDS
        or interaction.channel_id is None
    ):
        return None
    argument = ""
    options = data.get("options")
    for option in options if isinstance(options, list) else ():
        if isinstance(option, dict) and option.get("name") == _ARGUMENT.get(str(name)):
            argument = str(option.get("value") or "").strip()
    channel_id, thread_id = place_of(interaction.channel, interaction.guild_id, interaction.channel_id)
    user = interaction.user
    return InboundMessage(
        channel="discord",
        chat_key=chat_key_of(interaction.guild_id, channel_id, thread_id),
        chat_id=str(channel_id),
        message_id=str(interaction.id),
        sender_id=str(user.id),
        sender_name=user.display_name,
        text=f"/{name} {argument}".strip(),
        is_group=interaction.guild_id is not None,
        mentions_bot=True,  # a slash command is addressed to the bot
        sender_is_bot=user.bot,
        thread_id=str(thread_id) if thread_id is not None else None,
    )
