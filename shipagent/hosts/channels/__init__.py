"""Channels: the agent where people already talk (Telegram so far).

A :class:`Channel` adapter holds only a platform's wire details; the :class:`Pipeline` does what
is the same everywhere (access and pairing, dedupe, commands, per-chat queueing, streaming by
edits, splitting, retries); :class:`ChannelHost` starts the channels ship.json enables. This
package builds on the agent's public API only; the core never imports it (except the ship.json
model, :mod:`shipagent._channels_config`, which carries no dependency).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._channels_config import ChannelsConfig, GroupsConfig, TelegramConfig
    from ._access import AccessRules
    from ._commands import COMMANDS
    from ._dedupe import Dedupe
    from ._host import ChannelHost, channels_from_config
    from ._pairing import PairingError, PairingStore, PendingCode
    from ._pipeline import Pipeline, PipelineOptions
    from ._split import split_markdown
    from ._types import (
        Attachment,
        Button,
        ButtonPress,
        Capabilities,
        Channel,
        ChannelHealth,
        InboundMessage,
        MarkupRejected,
        Outbound,
        PermanentSendError,
        SentMessage,
        TransientSendError,
    )

__all__ = [
    "COMMANDS",
    "AccessRules",
    "Attachment",
    "Button",
    "ButtonPress",
    "Capabilities",
    "Channel",
    "ChannelHealth",
    "ChannelHost",
    "ChannelsConfig",
    "Dedupe",
    "GroupsConfig",
    "InboundMessage",
    "MarkupRejected",
    "Outbound",
    "PairingError",
    "PairingStore",
    "PendingCode",
    "PermanentSendError",
    "Pipeline",
    "PipelineOptions",
    "SentMessage",
    "TelegramConfig",
    "TransientSendError",
    "channels_from_config",
    "split_markdown",
]

_LAZY = {
    "AccessRules": "._access",
    "Attachment": "._types",
    "Button": "._types",
    "ButtonPress": "._types",
    "COMMANDS": "._commands",
    "Capabilities": "._types",
    "Channel": "._types",
    "ChannelHealth": "._types",
    "ChannelHost": "._host",
    "ChannelsConfig": "..._channels_config",
    "Dedupe": "._dedupe",
    "GroupsConfig": "..._channels_config",
    "InboundMessage": "._types",
    "MarkupRejected": "._types",
    "Outbound": "._types",
    "PairingError": "._pairing",
    "PairingStore": "._pairing",
    "PendingCode": "._pairing",
    "PermanentSendError": "._types",
    "Pipeline": "._pipeline",
    "PipelineOptions": "._pipeline",
    "SentMessage": "._types",
    "TelegramConfig": "..._channels_config",
    "TransientSendError": "._types",
    "channels_from_config": "._host",
    "split_markdown": "._split",
}


def __getattr__(name: str) -> Any:
    """Names load on first use: a program that only reads the ship.json model of the channels
    must not pay for the pipeline (pydantic-ai) or PTB."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
