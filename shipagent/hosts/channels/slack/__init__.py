"""The Slack channel (slack-sdk, Socket Mode; install with ``pip install 'shipagent[slack]'``)."""

from __future__ import annotations

from .._durable import WorkerSide
from ._channel import SlackChannel
from ._mrkdwn import markdown_to_mrkdwn
from ._wire import chat_key_of

__all__ = ["SlackChannel", "chat_key_of", "markdown_to_mrkdwn"]

WORKER_SIDE = WorkerSide(sender="_sender:SlackSender", channel="_channel:SlackChannel")
"""How a durable worker answers this platform's chats (:func:`~shipagent.hosts.channels._durable.worker_side`)."""
