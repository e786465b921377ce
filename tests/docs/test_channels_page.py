"""The "One agent on every platform" page: every ship.json on it loads with the real config parser,
and what it says stays the same from one platform to another really does.

Its ship.json blocks are ``manual`` (they need a reader's own tokens), so the runnable-blocks test
does not load them; this one does, with stand-in credentials in the project's ``.env``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipagent import load_config
from shipagent._channel_keys import GROUP_SECTIONS
from tests.docs.test_readme_runnable import Block, blocks_of
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "guides" / "channels.md"
STAND_INS = {  # what the ${VAR}s of the page stand for while it is tested
    "TELEGRAM_BOT_TOKEN": "123456:stand-in",
    "SLACK_BOT_TOKEN": "xoxb-stand-in",
    "SLACK_APP_TOKEN": "xapp-stand-in",
    "DISCORD_BOT_TOKEN": "stand-in",
    "FEISHU_APP_SECRET": "stand-in",
    "QQ_BOT_SECRET": "stand-in",
}
SAME_EVERYWHERE = [
    "dmPolicy",
    "debounceMs",
    "rateLimitPerMinute",
    "streaming",
    "showToolSteps",
    "textChunkLimit",
    "maxAttachmentBytes",
]
"""The keys the page says keep their value from one platform to another."""
NOT_ON_QQ = {"streaming", "showToolSteps"}  # QQ sends one final reply: its part leaves them out


def _ship_json_blocks() -> list[Block]:
    return [b for b in blocks_of(PAGE) if b.lang == "json" and '"channels"' in b.code]


BLOCKS = _ship_json_blocks()


@pytest.fixture(autouse=True)
def _no_real_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in STAND_INS:  # the environment wins over .env: a reader's real token must not
        monkeypatch.delenv(name, raising=False)


def _load(block: Block, root: Path) -> Any:
    (root / "ship.json").write_text(block.code, encoding="utf-8")
    (root / ".env").write_text("".join(f"{k}={v}\n" for k, v in STAND_INS.items()), encoding="utf-8")
    return load_config(root)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line {b.line}" for b in BLOCKS])
def test_every_ship_json_on_the_page_loads(block: Block, tmp_path: Path) -> None:
    config = _load(block, tmp_path)
    written = json.loads(block.code)["channels"]
    for platform in written:
        assert getattr(config.channels, platform).enabled, f"{block.where}: {platform} is not on"


def test_the_page_shows_each_platform_once_on_its_own() -> None:
    alone = [
        next(iter(json.loads(b.code)["channels"])) for b in BLOCKS if len(json.loads(b.code)["channels"]) == 1
    ]
    assert alone == ["telegram", "slack", "discord", "feishu", "qq"]
    together = [b for b in BLOCKS if len(json.loads(b.code)["channels"]) > 1]
    assert together, "the page shows several platforms on at once"


def test_what_stays_the_same_has_the_same_value_on_every_platform(tmp_path: Path) -> None:
    parts = {
        platform: section
        for b in BLOCKS
        for platform, section in json.loads(b.code)["channels"].items()
        if len(json.loads(b.code)["channels"]) == 1
    }
    for key in SAME_EVERYWHERE:
        values = {p: s[key] for p, s in parts.items() if not (p == "qq" and key in NOT_ON_QQ)}
        assert len(values) == (4 if key in NOT_ON_QQ else 5), f"{key} is missing on a platform"
        assert len({json.dumps(v) for v in values.values()}) == 1, f"{key} differs: {values}"
    for platform, section in parts.items():
        assert section["dmPolicy"] == "allowlist" and section["allowFrom"] and section["admins"]
        group = GROUP_SECTIONS[platform][1]  # the section's name is what the config calls it
        assert group in section, f"{platform}'s group section is not {group!r}"


def test_the_page_names_each_platform_s_group_section_as_the_config_does() -> None:
    text = PAGE.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| group section |"))
    cells = [c.strip().strip("`") for c in row.strip("|").split("|")[1:]]
    assert cells == [section for _, section in GROUP_SECTIONS.values()]
