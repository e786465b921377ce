"""Token counting: tiktoken's o200k_base built from the bundled file, never downloaded."""

from __future__ import annotations

import hashlib
import socket
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import tiktoken.load

from shipagent.window import tokens
from shipagent.window.tokens import O200K_SHA256, count_tokens, cut_text, encoding, token_upper_bound

# Reference token ids of o200k_base (as published by tiktoken for gpt-4o).
KNOWN = {
    "hello world": [24912, 2375],
    "Hello, world!": [13225, 11, 2375, 0],
    "The quick brown fox jumps over the lazy dog.": [
        976,
        4853,
        19705,
        68347,
        65613,
        1072,
        290,
        29082,
        6446,
        13,
    ],
}


def test_known_values() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("") == 0
    for text, ids in KNOWN.items():
        assert encoding().encode(text) == ids
        assert count_tokens(text) == len(ids)
    assert encoding().name == "o200k_base" and encoding().n_vocab == 200019


def test_special_token_text_is_counted_as_plain_text() -> None:
    # A user may type "<|endoftext|>": it must be counted, not raise.
    assert count_tokens("<|endoftext|>") == 7


def test_bundled_file_matches_tiktoken_sha256() -> None:
    data = resources.files("shipagent").joinpath("_data/o200k_base.tiktoken").read_bytes()
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256
    # ...which is the hash tiktoken itself expects for o200k_base.
    source = Path(__import__("tiktoken_ext.openai_public", fromlist=["x"]).__file__).read_text()
    assert f'expected_hash="{O200K_SHA256}"' in source


def test_corrupt_bundled_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fake:
        def joinpath(self, _name: str) -> Fake:
            return self

        def read_bytes(self) -> bytes:
            return b"aGVsbG8= 0\n"

    monkeypatch.setattr(tokens.resources, "files", lambda _pkg: Fake())
    with pytest.raises(RuntimeError, match="corrupt"):
        tokens._load_local_bpe("https://example.invalid/o200k_base.tiktoken")


def test_builds_without_network_or_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tiktoken tried to reach the network or its download cache")

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    fresh = encoding.__wrapped__()  # build anew, bypassing (and leaving alone) the process cache
    assert fresh.encode("hello world") == [24912, 2375]
    assert not (tmp_path / "empty-cache").exists()


@pytest.mark.parametrize(
    "text", ["plain ascii words", "日本語のテキスト", "emoji 🚀🔥👩‍👩‍👧", "x" * 5000, "\n\n\t  "]
)
def test_upper_bound_is_an_upper_bound(text: str) -> None:
    assert token_upper_bound(text) >= count_tokens(text)


def test_huge_texts_are_not_tokenised(monkeypatch: pytest.MonkeyPatch) -> None:
    huge = "word " * 100_000  # 500 kB
    monkeypatch.setattr(tokens, "_count", lambda _text: pytest.fail("tokenised a huge text"))
    assert count_tokens(huge) == len(huge)


def test_cut_text_keeps_head_and_tail_with_a_marker() -> None:
    text = " ".join(f"w{i}" for i in range(20_000))
    cut = cut_text(text, 200)
    assert cut.startswith("w0 w1 w2") and cut.endswith("w19998 w19999")
    assert "shipagent cut" in cut and "characters here" in cut
    assert count_tokens(cut) <= 200 + 40  # the budget plus the marker line
    assert cut_text("short", 200) == "short"
