"""The Feishu / Lark channel (lark-oapi; install with ``pip install 'shipagent[feishu]'``)."""

from __future__ import annotations

from ._channel import FeishuChannel
from ._wire import chat_key_of, post_content

__all__ = ["FeishuChannel", "chat_key_of", "post_content"]
