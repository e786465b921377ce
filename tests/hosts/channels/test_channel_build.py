"""Each platform's ship.json access keys become the same platform-neutral rules (ids as text)."""

from __future__ import annotations

from typing import Any

from shipagent.config import parse_config
from shipagent.hosts.channels import AccessRules
from shipagent.hosts.channels._build import access_rules


def _channels(section: str, keys: dict[str, Any]) -> Any:
    return getattr(parse_config({"channels": {section: keys}}, env={}).channels, section)


def test_number_ids_become_text_and_the_group_section_is_read_under_its_platform_name() -> None:
    telegram = _channels(
        "telegram",
        {"dmPolicy": "allowlist", "allowFrom": [42], "groups": {"policy": "open", "allow": [-100]}},
    )
    assert access_rules(telegram, telegram.groups) == AccessRules(
        dm_policy="allowlist",
        allow_from=frozenset({"42"}),
        group_policy="open",
        group_allow=frozenset({"-100"}),
    )
    slack = _channels("slack", {"allowFrom": ["U1"], "channels": {"allow": ["C1"], "requireMention": False}})
    assert access_rules(slack, slack.channels) == AccessRules(
        allow_from=frozenset({"U1"}), group_allow=frozenset({"C1"}), require_mention=False
    )


def test_an_adapter_that_applies_the_allowlist_itself_gets_an_open_pipeline_only_for_an_allowlist() -> None:
    allow = _channels("discord", {"guilds": {"policy": "allowlist", "allow": [7], "requireMention": False}})
    rules = access_rules(allow, allow.guilds, adapter_allowlist=True)
    assert (rules.group_policy, rules.group_allow, rules.require_mention) == ("open", frozenset(), False)
    off = _channels("discord", {"guilds": {"policy": "disabled", "allow": [7]}})
    assert access_rules(off, off.guilds, adapter_allowlist=True).group_policy == "disabled"


def test_qq_groups_always_need_a_mention_without_a_key_for_it() -> None:
    qq = _channels("qq", {"groups": {"policy": "allowlist", "allow": ["G1"]}})
    rules = access_rules(qq, qq.groups)
    assert rules.require_mention and rules.group_allow == frozenset({"G1"})


def test_the_check_line_says_the_access_rules_in_each_platforms_words() -> None:
    from shipagent.hosts.channels._check import access_line

    slack = _channels("slack", {"allowFrom": ["U1", "U2"], "channels": {"policy": "open"}})
    assert access_line(slack, slack.channels, noun="channel", anywhere="any channel the bot is in") == (
        "direct messages: pairing (2 in allowFrom); any channel the bot is in, mention needed"
    )
    discord = _channels("discord", {"dmPolicy": "open", "guilds": {"policy": "disabled"}})
    assert access_line(discord, discord.guilds, noun="guild").endswith("(0 in allowFrom); no guilds")
    qq = _channels("qq", {"groups": {"allow": ["G1"]}})
    assert access_line(qq, qq.groups, mention=None).endswith("; 1 allowed group(s)")
