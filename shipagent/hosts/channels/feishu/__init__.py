"""The Feishu / Lark channel (lark-oapi; install with ``pip install 'shipagent[feishu]'``)."""

from __future__ import annotations

from .._durable import WorkerSide
from ._channel import FeishuChannel
from ._wire import chat_key_of, post_content

__all__ = ["FeishuChannel", "chat_key_of", "post_content"]

WORKER_SIDE = WorkerSide(sender="_rest:FeishuSender", channel="_channel:FeishuChannel")
"""How a durable worker answers this platform's chats (:func:`~shipagent.hosts.channels._durable.worker_side`)."""
