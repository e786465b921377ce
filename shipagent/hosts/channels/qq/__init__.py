"""The QQ channel on the official bot API (httpx + websockets; ``pip install 'shipagent[qq]'``)."""

from __future__ import annotations

from .._durable import WorkerSide
from ._channel import QQChannel
from ._wire import INTENTS, chat_key_of, plain_text

__all__ = ["INTENTS", "QQChannel", "chat_key_of", "plain_text"]

WORKER_SIDE = WorkerSide(
    refused=(
        "QQ accepts only passive replies, each naming the message it answers, within minutes of it "
        "(5 in groups): a turn queued behind others or resumed after a crash can outlast that, and "
        "QQ's replies go through the live channel (its msg_seq count), not a sender a worker could "
        "build; run the QQ channel without durable.enabled"
    )
)
"""Durable workers do not answer QQ: its messages are refused where they arrive, saying why."""
