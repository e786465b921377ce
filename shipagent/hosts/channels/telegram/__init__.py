"""The Telegram channel (python-telegram-bot; install with ``pip install 'shipagent[telegram]'``)."""

from __future__ import annotations

from .._durable import WorkerSide
from ._channel import TelegramChannel
from ._html import markdown_to_html
from ._wire import chat_key_of

__all__ = ["TelegramChannel", "chat_key_of", "markdown_to_html"]

WORKER_SIDE = WorkerSide(sender="_sender:TelegramSender", channel="_channel:TelegramChannel")
"""How a durable worker answers this platform's chats (:func:`~shipagent.hosts.channels._durable.worker_side`)."""
