"""The Telegram channel (python-telegram-bot; install with ``pip install 'shipagent[telegram]'``)."""

from __future__ import annotations

from ._channel import TelegramChannel
from ._html import markdown_to_html
from ._wire import chat_key_of

__all__ = ["TelegramChannel", "chat_key_of", "markdown_to_html"]
