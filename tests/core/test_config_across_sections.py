"""Rules that tie two sections of ship.json together are checked at load, naming both keys."""

from __future__ import annotations

import pytest

from shipagent.config import parse_config
from shipagent.errors import ConfigError

QQ = {"enabled": True, "appId": "102012345", "clientSecret": "s" * 16}


def test_qq_with_durable_turns_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"durable": {"enabled": True}, "channels": {"qq": QQ}})
    message = str(caught.value)
    assert message.startswith("ship.json: channels.qq cannot be enabled with durable.enabled")
    assert "Value error" not in message and "''" not in message
    assert "s" * 16 not in message  # the secret is never in an error


@pytest.mark.parametrize("durable", [True, False])
def test_each_side_alone_is_fine(durable: bool) -> None:
    config = parse_config(
        {"durable": {"enabled": durable}, "channels": {"qq": {**QQ, "enabled": not durable}}}
    )
    assert config.durable.enabled is durable and config.channels.qq.enabled is not durable
