"""The QQ channel on the official bot API (httpx + websockets; ``pip install 'shipagent[qq]'``)."""

from __future__ import annotations

from ._channel import QQChannel
from ._wire import INTENTS, chat_key_of, plain_text

__all__ = ["INTENTS", "QQChannel", "chat_key_of", "plain_text"]
