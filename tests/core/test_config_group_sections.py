"""The group section has a different name per platform (``groups``, ``channels``, ``guilds``): a
ship.json moved from one platform to another that keeps the old name is told the new one."""

from __future__ import annotations

import pytest

from shipagent.config import parse_config
from shipagent.errors import ConfigError

RIGHT = {"telegram": "groups", "slack": "channels", "discord": "guilds", "feishu": "groups", "qq": "groups"}
NAMES = {"telegram": "Telegram", "slack": "Slack", "discord": "Discord", "feishu": "Feishu", "qq": "QQ"}
WRONG = [
    (platform, key)
    for platform, right in RIGHT.items()
    for key in ("groups", "channels", "guilds")
    if key != right
]


@pytest.mark.parametrize(("platform", "key"), WRONG, ids=[f"{p}.{k}" for p, k in WRONG])
def test_another_platform_s_section_name_is_told_this_platform_s(platform: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"channels": {platform: {key: {"allow": []}}}})
    right = RIGHT[platform]
    assert caught.value.path == f"channels.{platform}.{key}"
    assert str(caught.value) == (
        f"ship.json: unknown key 'channels.{platform}.{key}' "
        f"({NAMES[platform]} calls this section '{right}': channels.{platform}.{right})"
    )


@pytest.mark.parametrize("platform", RIGHT)
def test_the_right_name_is_accepted(platform: str) -> None:
    config = parse_config({"channels": {platform: {RIGHT[platform]: {"policy": "open"}}}})
    section = getattr(getattr(config.channels, platform), RIGHT[platform])
    assert section.policy == "open"


def test_other_unknown_keys_keep_the_usual_hint() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"channels": {"slack": {"channels": {"alow": []}}}})
    assert "did you mean 'allow'" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        parse_config({"channels": {"slack": {"grops": {}}}})  # no hint about a section it is not
    assert "calls this section" not in str(caught.value)
