"""The channel room's parts on their own: splitting, HTML, commands, dedupe, pairing, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.hosts.channels import Dedupe, PairingError, PairingStore, split_markdown
from shipagent.hosts.channels._commands import parse_command
from shipagent.hosts.channels._pairing import CODE_TTL_SECONDS
from shipagent.hosts.channels.telegram import chat_key_of, markdown_to_html
from tests.support.telegram_server import visible_text


def _fences_balanced(piece: str) -> bool:
    return sum(1 for line in piece.splitlines() if line.strip().startswith("```")) % 2 == 0


@pytest.mark.parametrize("limit", [64, 200, 4000])
def test_split_keeps_every_piece_within_the_limit_with_balanced_fences(limit: int) -> None:
    code = "\n".join(f"print({i})  # {'x' * (i % 30)}" for i in range(300))
    text = "Intro paragraph. " * 50 + f"\n\n```python\n{code}\n```\n\nAfter the code. " + "word " * 500
    pieces = split_markdown(text, limit)
    assert all(len(p) <= limit for p in pieces)
    assert all(_fences_balanced(p) for p in pieces)
    words = [w for p in pieces for w in p.split() if not w.startswith("```")]
    assert words == [w for w in text.split() if not w.startswith("```")]


def test_split_cuts_a_single_long_line_and_leaves_short_text_alone() -> None:
    assert split_markdown("short", 100) == ["short"]
    assert split_markdown("   ", 100) == []
    pieces = split_markdown("a" * 250, 100)
    assert [len(p) for p in pieces] == [100, 100, 50]


def test_markdown_becomes_balanced_telegram_html_and_everything_else_is_escaped() -> None:
    source = (
        "# Title\n**bold** *it* _it2_ ~~gone~~ `a<b>` [site](https://e.com/?a=1&b=2) 2*3*4 <script>\n> quoted"
    )
    rendered = markdown_to_html(source)
    text, problem = visible_text(rendered, "HTML")
    assert problem is None
    assert "<b>Title</b>" in rendered and "<b>bold</b>" in rendered and "<i>it</i>" in rendered
    assert "<s>gone</s>" in rendered and "<code>a&lt;b&gt;</code>" in rendered
    assert '<a href="https://e.com/?a=1&amp;b=2">site</a>' in rendered
    assert "<blockquote>quoted</blockquote>" in rendered
    assert "2*3*4 <script>" in text  # literal, escaped: never a tag


def test_code_blocks_keep_their_language_and_unclosed_markers_stay_literal() -> None:
    rendered = markdown_to_html("```python\nif a < b: **x**\n```\nan **unclosed marker and `tick")
    assert '<pre><code class="language-python">if a &lt; b: **x**</code></pre>' in rendered
    assert visible_text(rendered, "HTML")[1] is None
    assert "**unclosed marker and `tick" in visible_text(rendered, "HTML")[0]


def test_commands_resolve_aliases_and_skip_other_bots() -> None:
    assert parse_command("/clear", "ship_bot") is not None and parse_command("/clear", None).name == "new"  # type: ignore[union-attr]
    assert parse_command("/status@ship_bot", "ship_bot").name == "status"  # type: ignore[union-attr]
    assert parse_command("/status@other_bot", "ship_bot") is None
    assert parse_command("/unknown", "ship_bot") is None
    assert parse_command("hello /new", "ship_bot") is None


def test_chat_keys_of_chats_and_topics() -> None:
    assert chat_key_of(42, None) == "telegram:chat:42"
    assert chat_key_of(-100123, 7) == "telegram:chat:-100123:topic:7"


@pytest.mark.anyio
async def test_dedupe_survives_a_restart_within_a_bounded_window(tmp_path: Path) -> None:
    seen = Dedupe(tmp_path, "telegram", window=5)
    assert await seen.accept("42", "1")
    assert not await seen.accept("42", "1")
    assert await seen.accept("43", "1")  # another chat, same message id
    for n in range(2, 20):
        assert await seen.accept("42", str(n))
    again = Dedupe(tmp_path, "telegram", window=5)
    assert not await again.accept("42", "19")
    assert await again.accept("42", "2")  # beyond the window: forgotten
    assert len(seen.path.read_text().splitlines()) <= 2 * 5 + 1  # the file stays bounded too


@pytest.mark.anyio
async def test_a_torn_line_left_by_a_crash_never_swallows_the_next_accepted_message(tmp_path: Path) -> None:
    seen = Dedupe(tmp_path, "telegram")
    assert await seen.accept("42", "1", {"text": "first"})
    with seen.path.open("a") as handle:
        handle.write('{"chat": "42", "mess')  # the process died mid-append
    again = Dedupe(tmp_path, "telegram")
    assert not await again.accept("42", "1")
    assert await again.accept("42", "2", {"text": "second"})
    third = Dedupe(tmp_path, "telegram")
    assert not await third.accept("42", "2")  # recorded on a line of its own, readable
    assert await third.unfinished() == [{"text": "first"}, {"text": "second"}]


def test_pairing_codes_are_single_use_and_expire(tmp_path: Path) -> None:
    now = [1000.0]
    store = PairingStore(tmp_path, clock=lambda: now[0])
    first = store.request("telegram", "7", "Ada")
    assert store.request("telegram", "7", "Ada").code == first.code
    assert [p.code for p in store.pending()] == [first.code]
    assert not store.is_paired("telegram", "7")
    store.pair(first.code.lower())
    assert store.is_paired("telegram", "7") and not store.is_paired("telegram", "8")
    with pytest.raises(PairingError, match="already used"):
        store.pair(first.code)
    late = store.request("telegram", "8", "Bob")
    now[0] += CODE_TTL_SECONDS + 1
    with pytest.raises(PairingError, match="expired"):
        store.pair(late.code)
    assert store.pending() == []


def test_the_telegram_config_validates_like_the_rest_of_ship_json() -> None:
    with pytest.raises(ConfigError, match=r"channels\.telegram\.botTokn.*botToken"):
        parse_config({"channels": {"telegram": {"botTokn": "x"}}})
    with pytest.raises(ConfigError, match="botToken is required"):
        parse_config({"channels": {"telegram": {"enabled": True}}})
    config = parse_config(
        {"channels": {"telegram": {"enabled": True, "botToken": "${TG_TOKEN}", "groups": {"allow": [-1]}}}},
        env={"TG_TOKEN": "999:secret"},
    )
    telegram = config.channels.telegram
    assert telegram.bot_token == "999:secret" and telegram.groups.require_mention
    assert telegram.dm_policy == "pairing" and telegram.text_chunk_limit == 4000
    assert "999:secret" not in repr(config)
    with pytest.raises(ConfigError, match="TG_TOKEN"):
        parse_config({"channels": {"telegram": {"enabled": True, "botToken": "${TG_TOKEN}"}}}, env={})
    assert "channels" in json.dumps(type(config).model_json_schema(by_alias=True))


def test_group_chatter_keeps_the_last_lines_of_the_most_recently_active_groups() -> None:
    from shipagent.hosts.channels._types import InboundMessage
    from shipagent.hosts.channels._unaddressed import GroupChatter

    chatter = GroupChatter(2, max_groups=2)

    def said(group: str, text: str) -> None:
        chatter.keep(
            InboundMessage(
                channel="telegram",
                chat_key=f"telegram:chat:{group}",
                chat_id=group,
                message_id=text,
                sender_id="7",
                sender_name="Ann",
                text=text,
                is_group=True,
            )
        )

    said("-1", "one")
    said("-2", "two")
    said("-1", "three")  # -1 is the most recently active again
    said("-1", "four")
    said("-3", "five")  # beyond two groups: -2, quiet longest, is dropped

    def lines(chat: str) -> list[str]:
        kept = chatter.take(f"telegram:chat:{chat}")
        return [] if kept is None else [line.rsplit(": ", 1)[1] for line in kept.splitlines()[1:]]

    assert lines("-2") == []
    assert lines("-1") == ["three", "four"]  # the last two lines only
    assert lines("-1") == []  # taken once
    assert lines("-3") == ["five"]
