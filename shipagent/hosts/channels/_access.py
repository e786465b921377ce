"""Who may talk to the agent through a channel: direct-message policy, groups, mentions, bots.

Nothing a refused message says reaches the model. The rules are the channel's ship.json keys
(``dmPolicy``, ``allowFrom``, ``groups``); paired senders come from :class:`PairingStore`, read
again when the file changes, so ``shipagent channels pair`` needs no restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import anyio.to_thread

from ._pairing import PairingStore, PendingCode
from ._types import InboundMessage

__all__ = ["NOT_ADDRESSED", "AccessRules", "Decision", "decide"]

NOT_ADDRESSED = "not addressed to the bot"
"""Why a group message was ignored under ``requireMention`` (``groups.historyLimit`` keeps those)."""


@dataclass(frozen=True, slots=True)
class AccessRules:
    """A channel's access keys, platform-neutral (ids as text)."""

    dm_policy: Literal["pairing", "allowlist", "open"] = "pairing"
    allow_from: frozenset[str] = frozenset()
    group_policy: Literal["allowlist", "open", "disabled"] = "allowlist"
    group_allow: frozenset[str] = frozenset()
    require_mention: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """``allow``, ``ignore`` (silently), or ``pair`` (answer with ``code``, nothing else)."""

    action: Literal["allow", "ignore", "pair"]
    reason: str = ""
    code: PendingCode | None = None


async def decide(
    message: InboundMessage, rules: AccessRules, pairing: PairingStore, *, is_command: bool
) -> Decision:
    """What to do with ``message`` before anything of it reaches the model."""
    if message.sender_is_bot:
        return Decision("ignore", "sent by a bot")
    if message.is_group:
        if rules.group_policy == "disabled":
            return Decision("ignore", "groups are disabled")
        if rules.group_policy == "allowlist" and message.chat_id not in rules.group_allow:
            return Decision("ignore", f"group {message.chat_id} is not in groups.allow")
        if rules.require_mention and not (message.mentions_bot or is_command):
            return Decision("ignore", NOT_ADDRESSED)
        return Decision("allow")
    if rules.dm_policy == "open" or message.sender_id in rules.allow_from:
        return Decision("allow")
    if rules.dm_policy == "allowlist":
        return Decision("ignore", f"sender {message.sender_id} is not in allowFrom")
    if await anyio.to_thread.run_sync(pairing.is_paired, message.channel, message.sender_id):
        return Decision("allow")
    code = await anyio.to_thread.run_sync(
        pairing.request, message.channel, message.sender_id, message.sender_name
    )
    return Decision("pair", "unknown sender", code)
