"""A channel's :class:`Pipeline` from its ship.json section, the same way on every platform.

Every platform's section has the same access keys (``dmPolicy``, ``allowFrom``, ``admins``) and a
group section (``groups``; ``channels`` on Slack, ``guilds`` on Discord) with ``policy``,
``allow`` and ``requireMention`` (always true on QQ). Ids are numbers on Telegram and Discord and text
elsewhere; the pipeline compares them as text. Building the rules here keeps that mapping in one
place, so a new key or a new platform cannot be read differently by one adapter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ._access import AccessRules
from ._dedupe import Dedupe
from ._pairing import PairingStore
from ._pipeline import Pipeline, PipelineOptions
from ._types import ChannelHealth, Outbound

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent

__all__ = ["AccessKeys", "GroupKeys", "access_rules", "channel_pipeline", "ids"]


class GroupKeys(Protocol):
    """A platform's group section (``channels.<platform>.groups`` or its Slack / Discord name)."""

    @property
    def policy(self) -> Literal["allowlist", "open", "disabled"]: ...
    @property
    def allow(self) -> Sequence[int | str]: ...
    @property
    def require_mention(self) -> bool: ...


class AccessKeys(Protocol):
    """The access keys every platform's section has (``channels.<platform>``)."""

    @property
    def dm_policy(self) -> Literal["pairing", "allowlist", "open"]: ...
    @property
    def allow_from(self) -> Sequence[int | str]: ...
    @property
    def admins(self) -> Sequence[int | str]: ...


def ids(values: Iterable[int | str]) -> frozenset[str]:
    """Platform ids as the pipeline compares them: text (a Telegram user id ``42`` is ``"42"``)."""
    return frozenset(str(value) for value in values)


def access_rules(config: AccessKeys, groups: GroupKeys, *, adapter_allowlist: bool = False) -> AccessRules:
    """The access rules ``config`` and its group section ``groups`` set.

    ``adapter_allowlist``: the adapter applies ``groups.allow`` itself, because the ids there are
    not chat ids (Discord's name guilds, whose channels are the chats): the pipeline then lets any
    group through an allowlist and keeps no group ids of its own.
    """
    policy = groups.policy
    if adapter_allowlist and policy == "allowlist":
        policy = "open"
    return AccessRules(
        dm_policy=config.dm_policy,
        allow_from=ids(config.allow_from),
        group_policy=policy,
        group_allow=frozenset() if adapter_allowlist else ids(groups.allow),
        require_mention=groups.require_mention,
    )


def channel_pipeline(
    agent: ShipAgent,
    outbound: Outbound,
    *,
    channel: str,
    config: AccessKeys,
    groups: GroupKeys,
    options: PipelineOptions,
    state_dir: Path,
    health: ChannelHealth,
    adapter_allowlist: bool = False,
) -> Pipeline:
    """The pipeline of the ``channel`` adapter: its access rules and admins from ``config``, the
    pairing codes and the dedupe record under ``state_dir`` (``.ship/channels``)."""
    return Pipeline(
        agent,
        outbound,
        channel=channel,
        rules=access_rules(config, groups, adapter_allowlist=adapter_allowlist),
        pairing=PairingStore(state_dir),
        dedupe=Dedupe(state_dir, channel),
        health=health,
        admins=ids(config.admins),
        options=options,
    )
