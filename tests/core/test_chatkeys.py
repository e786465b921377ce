"""Chat keys: validation, the reversible file-name encoding, and that no key escapes ``.ship/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shipagent import ChatKeyError, ShipAgentError
from shipagent.chatkeys import ShipPaths, decode_chat_key, encode_chat_key, validate_chat_key
from tests.support.core import ScriptedModel, make_agent, make_project, read_jsonl

HOSTILE = [
    "../../x",
    "../../../../../../etc/passwd",
    "/etc/passwd",
    ".",
    "..",
    "...",
    "./",
    "a/../../b",
    "..\\..\\windows",
    "~",
    "~root",
    "%2E%2E",
    "%2F",
    "-rf",
    " ",
    "CON",
    ".ship",
    "chats/../../escape",
]
FRIENDLY = [
    "telegram:chat:42",
    "api:chat:alice",
    "slack:T123/C456",
    "café",
    "日本語のチャット",
    "привет",
    "emoji 🚀🔥 chat",
    "👩‍👩‍👧‍👦",
    "a~b",
    "100%",
    "tab\u200bzero-width",
    "x" * 200,
]


def _name_is_safe(name: str) -> None:
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert len(name.encode("utf-8")) <= 255
    assert len(f"{name}.jsonl".encode()) <= 255
    assert name.isascii() and name.isprintable()
    assert not name.startswith(".")


@pytest.mark.parametrize("key", HOSTILE + FRIENDLY)
def test_encoded_names_are_safe_and_decode_back(key: str) -> None:
    name = encode_chat_key(key)
    _name_is_safe(name)
    assert Path(name).name == name
    assert decode_chat_key(name) == key


def test_traversal_keys_are_encoded_not_interpreted() -> None:
    assert encode_chat_key("../../x") == "%2E%2E%2F%2E%2E%2Fx"
    assert encode_chat_key("/etc/passwd") == "%2Fetc%2Fpasswd"
    assert encode_chat_key(".") == "%2E"
    assert encode_chat_key("..") == "%2E%2E"
    assert encode_chat_key("telegram:chat:42") == "telegram%3Achat%3A42"
    # A key that already looks encoded does not collide with the key it looks like.
    assert encode_chat_key("%2E%2E") != encode_chat_key("..")


@pytest.mark.parametrize(
    "key",
    ["", "a\x00b", "\x00", "line\nbreak", "cr\r", "tab\tkey", "\x1b[31mred", "del\x7f", "c1\x85", "\ud800"],
    ids=["empty", "nul-inside", "nul", "newline", "cr", "tab", "escape", "del", "c1", "surrogate"],
)
def test_invalid_keys_raise_chat_key_error(key: str) -> None:
    with pytest.raises(ChatKeyError):
        validate_chat_key(key)
    with pytest.raises(ChatKeyError):
        encode_chat_key(key)


def test_non_string_keys_raise() -> None:
    for bad in (None, 42, b"bytes", ["k"]):
        with pytest.raises(ChatKeyError, match="must be a string"):
            validate_chat_key(bad)


def test_chat_key_error_is_a_shipagent_error_and_a_value_error() -> None:
    assert issubclass(ChatKeyError, ShipAgentError) and issubclass(ChatKeyError, ValueError)


def test_length_limit_is_512_characters() -> None:
    assert validate_chat_key("k" * 512) == "k" * 512
    assert validate_chat_key("🚀" * 512) == "🚀" * 512  # characters, not bytes
    with pytest.raises(ChatKeyError, match="513 characters long; the limit is 512"):
        validate_chat_key("k" * 513)


def test_long_keys_are_hashed_within_255_bytes_and_stay_unique() -> None:
    keys = [
        "k" * 512,
        "k" * 511 + "j",
        "k" * 201,
        "🚀" * 512,
        "🚀" * 511 + "🔥",
        "日本" * 256,
        "a/" * 256,
        "%" * 512,
    ]
    names = [encode_chat_key(k) for k in keys]
    for key, name in zip(keys, names, strict=True):
        _name_is_safe(name)
        assert "~" in name and decode_chat_key(name) is None  # hashed: not reversible, says so
        assert encode_chat_key(key) == name  # stable
    assert len(set(names)) == len(names)
    # The readable prefix is kept, and never ends in half of a %XX escape.
    assert names[0].startswith("kkkk")
    for name in names:
        prefix = name.rsplit("~", 1)[0]
        assert "%" not in prefix[-2:]


def test_the_longest_unhashed_key_round_trips() -> None:
    assert decode_chat_key(encode_chat_key("x" * 200)) == "x" * 200
    assert "~" in encode_chat_key("x" * 201)
    emoji = "🚀" * 16  # 16 x 4 bytes x 3 chars = 192 chars
    assert decode_chat_key(encode_chat_key(emoji)) == emoji


def test_paths_stay_inside_ship_dir(tmp_path: Path) -> None:
    paths = ShipPaths(tmp_path)
    ship = (tmp_path / ".ship").resolve()
    for key in HOSTILE + FRIENDLY + ["k" * 512]:
        for path in (
            paths.chat_dir(key),
            paths.transcript(key),
            paths.message_log(key),
            paths.agent_context(key),
            paths.context_dir(key),
            paths.outputs_dir(key),
        ):
            resolved = path.resolve()
            assert resolved.is_relative_to(ship), (key, path)
            assert ".." not in path.relative_to(tmp_path).parts


def _assert_only_dot_ship_written(tmp_path: Path, root: Path) -> None:
    outside = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if root not in p.parents)
    assert outside == ["etc", "project"]
    ship = root / ".ship"
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path == ship:
                continue
            assert path.resolve().is_relative_to(ship.resolve()), path
            assert not path.is_symlink()


@pytest.mark.anyio
async def test_runs_with_hostile_keys_write_only_inside_dot_ship(tmp_path: Path) -> None:
    root = make_project(tmp_path / "project")
    (tmp_path / "etc").mkdir()  # a decoy target next to the project
    scripted = ScriptedModel()
    agent = make_agent(root, scripted.model)
    keys = [*HOSTILE, "🚀" * 512, "日本語のチャット"]
    for key in keys:
        result = await agent.run(key, f"hello from {key}")
        assert result.success, (key, result.output)

    _assert_only_dot_ship_written(tmp_path, root)
    # Each chat got its own files, and the transcript records the key as given.
    assert len(os.listdir(root / ".ship" / "chats")) == len(keys)
    for key in keys:
        transcript = read_jsonl(agent.transcript.path(key))
        assert [e["chatKey"] for e in transcript] == [key, key]
        assert agent.history(key)[0].parts[0].content == f"hello from {key}"


@pytest.mark.anyio
async def test_run_rejects_bad_keys_before_touching_disk(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    scripted = ScriptedModel()
    agent = make_agent(root, scripted.model)
    for bad in ("", "a\x00b", "k" * 513, "new\nline"):
        with pytest.raises(ChatKeyError):
            await agent.run(bad, "hi")
        with pytest.raises(ChatKeyError):
            agent.history(bad)
    assert scripted.requests == []
    assert not (root / ".ship").exists() or not any((root / ".ship").rglob("*.jsonl"))
