"""The Discord channel (discord.py; install with ``pip install 'shipagent[discord]'``)."""

from __future__ import annotations

from .._durable import WorkerSide
from ._channel import DiscordChannel, intents
from ._wire import chat_key_of, discord_markdown

__all__ = ["DiscordChannel", "chat_key_of", "discord_markdown", "intents"]

WORKER_SIDE = WorkerSide(sender="_sender:DiscordSender", channel="_channel:DiscordChannel")
"""How a durable worker answers this platform's chats (:func:`~shipagent.hosts.channels._durable.worker_side`)."""
