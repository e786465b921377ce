"""The Discord channel (discord.py; install with ``pip install 'shipagent[discord]'``)."""

from __future__ import annotations

from ._channel import DiscordChannel, intents
from ._wire import chat_key_of, discord_markdown

__all__ = ["DiscordChannel", "chat_key_of", "discord_markdown", "intents"]
