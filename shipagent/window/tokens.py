"""Token counting with tiktoken's ``o200k_base``, loaded from the package, never downloaded.

tiktoken normally fetches its BPE file over HTTP on first use, which fails on an offline machine.
shipagent ships the file (MIT-licensed data) as ``shipagent/_data/o200k_base.tiktoken`` and builds
the encoding from it, verifying the SHA-256 tiktoken itself expects.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
import types
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

__all__ = ["O200K_SHA256", "TokenCalibration", "count_tokens", "cut_text", "encoding", "token_upper_bound"]

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_lock = threading.Lock()
_LARGE = 256 * 1024  # texts above this many chars are cut before they are ever tokenised


def _load_local_bpe(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    data = resources.files("shipagent").joinpath("_data/o200k_base.tiktoken").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256 or (expected_hash and digest != expected_hash):
        raise RuntimeError(f"shipagent's bundled o200k_base.tiktoken is corrupt (sha256 {digest})")
    return _parse_bpe(data)


def _parse_bpe(data: bytes) -> dict[bytes, int]:
    """Parse the ``.tiktoken`` format: one ``<base64 token> <rank>`` pair a line."""
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The ``o200k_base`` encoding, built once per process from the bundled file.

    tiktoken is imported here, on the first count, not with the module: an agent that is built
    but never plans a request (``shipagent --help``, a CLI command) does not load it.
    """
    import tiktoken
    from tiktoken_ext import openai_public

    with _lock:
        # Re-run tiktoken's own constructor with its loader swapped for ours, so the pattern and
        # special tokens are exactly tiktoken's, and nothing global is patched.
        ctor = openai_public.o200k_base
        local = types.FunctionType(
            ctor.__code__, {**ctor.__globals__, "load_tiktoken_bpe": _load_local_bpe}, ctor.__name__
        )
        kwargs: dict[str, Any] = local()
        return tiktoken.Encoding(**kwargs)


def token_upper_bound(text: str) -> int:
    """A cheap upper bound: no o200k token is shorter than one UTF-8 byte."""
    return len(text.encode("utf-8")) if not text.isascii() else len(text)


@functools.lru_cache(maxsize=16384)
def _count(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def count_tokens(text: str) -> int:
    """Tokens of ``text`` in o200k_base (cached: history texts are counted once per process)."""
    if not text:
        return 0
    if len(text) > _LARGE:
        return token_upper_bound(text)  # such texts are cut before they are sent anyway
    return _count(text)


def cut_text(text: str, max_tokens: int) -> str:
    """Keep the head and tail of ``text`` within about ``max_tokens``, with a visible marker."""
    if count_tokens(text) <= max_tokens:
        return text
    enc = encoding()
    half = max(max_tokens // 2 - 24, 8)
    head_ids = enc.encode(text[: half * 8], disallowed_special=())[:half]
    tail_ids = enc.encode(text[-half * 8 :], disallowed_special=())[-half:]
    head, tail = enc.decode(head_ids), enc.decode(tail_ids)
    removed = max(len(text) - len(head) - len(tail), 0)
    marker = (
        f"\n[… shipagent cut {removed} characters here: this message was larger than the context "
        f"budget allows …]\n"
    )
    return head + marker + tail


class TokenCalibration:
    """Per model, how the provider's input-token count compares to our o200k estimate.

    o200k_base is exact for OpenAI's current models and an estimate for the rest: a Claude or
    llama tokenizer can need noticeably more tokens for the same text, so a budget in o200k
    tokens would overfill their window. Each request leaves its estimate pending (per chat);
    the next request of that chat finds the provider's ``input_tokens`` on the response and
    settles it. The ratio actual / estimated is kept bounded to ``[1, MAX_RATIO]`` — a model that
    needs fewer tokens than we count is merely under-filled, never overflowed — and the next
    request's budget is divided by it.
    """

    MAX_RATIO = 2.0

    def __init__(self) -> None:
        self._ratios: dict[str, float] = {}
        self._pending: dict[str, tuple[str, int, int]] = {}

    def ratio(self, model: str) -> float:
        """The correction for ``model`` (1.0 until the provider reported a count)."""
        return self._ratios.get(model, 1.0)

    def observe(self, model: str, estimated: int, actual: int) -> float:
        """Record one request's estimate and the provider's count; returns the new ratio."""
        if estimated <= 0 or actual <= 0:
            return self.ratio(model)
        ratio = min(max(actual / estimated, 1.0), self.MAX_RATIO)
        self._ratios[model] = ratio
        return ratio

    def expect(self, key: str, model: str, estimated: int, sent_messages: int) -> None:
        """A request of conversation ``key`` sent ``sent_messages`` messages with this estimate."""
        self._pending[key] = (model, estimated, sent_messages)

    def settle(self, key: str, actual: int, position: int) -> tuple[int, float] | None:
        """The response at ``position`` of the chat's messages counted ``actual`` input tokens.

        It answers the pending request only if it comes after what that request sent (an older
        response of the history must not be paired with it). Returns ``(estimate, new ratio)``.
        """
        pending = self._pending.get(key)
        if pending is None or actual <= 0 or position < pending[2]:
            return None
        del self._pending[key]
        model, estimated, _ = pending
        return estimated, self.observe(model, estimated, actual)
