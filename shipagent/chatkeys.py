"""Chat keys and where their files live.

A chat key (``telegram:chat:42``) is user input: it becomes a directory or file name only through
:func:`encode_chat_key`, whose output can never be ``.``/``..``, contain ``/`` or NUL, or exceed
255 bytes, so no key can reach a path outside ``.ship/``.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .errors import ChatKeyError

__all__ = ["MAX_CHAT_KEY_LENGTH", "ShipPaths", "decode_chat_key", "encode_chat_key", "validate_chat_key"]

MAX_CHAT_KEY_LENGTH = 512
_MAX_NAME_BYTES = 200  # well under the 255-byte limit, leaving room for suffixes like ".jsonl"
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def validate_chat_key(chat_key: object) -> str:
    """Return ``chat_key`` if it is usable, else raise :class:`ChatKeyError` saying why."""
    if not isinstance(chat_key, str):
        raise ChatKeyError(f"chat key must be a string, got {type(chat_key).__name__}")
    if not chat_key:
        raise ChatKeyError("chat key must not be empty")
    if len(chat_key) > MAX_CHAT_KEY_LENGTH:
        raise ChatKeyError(f"chat key is {len(chat_key)} characters long; the limit is {MAX_CHAT_KEY_LENGTH}")
    if chat_key.isprintable():  # the usual key, checked in C: no printable char is Cc or Cs
        return chat_key
    for index, char in enumerate(chat_key):
        if unicodedata.category(char) in ("Cc", "Cs") or char == "\x00":
            raise ChatKeyError(
                f"chat key {chat_key[:40]!r} holds control character U+{ord(char):04X} at index {index}"
            )
    return chat_key


def encode_chat_key(chat_key: str) -> str:
    """A file name for ``chat_key``: reversible for keys up to ~60 characters, hashed beyond.

    Letters, digits, ``_`` and ``-`` stay as they are; every other byte of the UTF-8 form becomes
    ``%XX`` (so ``.`` and ``/`` never survive). An encoding longer than 200 bytes keeps a readable
    prefix and appends ``~`` and 16 hex digits of the key's SHA-256, which keeps names unique.
    """
    return _encode(validate_chat_key(chat_key))


@functools.lru_cache(maxsize=4096)  # every store of a turn asks for the same few keys' names
def _encode(chat_key: str) -> str:
    out: list[str] = []
    for byte in chat_key.encode("utf-8"):
        char = chr(byte)
        out.append(char if char in _SAFE else f"%{byte:02X}")
    name = "".join(out)
    if len(name) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(chat_key.encode("utf-8")).hexdigest()[:16]
    prefix = name[: _MAX_NAME_BYTES - 17]
    cut = prefix.rfind("%", len(prefix) - 2)
    if cut != -1:  # never leave half of a %XX escape behind
        prefix = prefix[:cut]
    return f"{prefix}~{digest}"


def decode_chat_key(name: str) -> str | None:
    """The chat key a file name encodes, or ``None`` for hashed (long-key) names."""
    if "~" in name:
        return None
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%":
            raw.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(name[i]))
            i += 1
    return raw.decode("utf-8")


@dataclass(frozen=True, slots=True)
class ShipPaths:
    """Every path under a project's ``.ship/`` directory, derived in one place."""

    project_root: Path

    @property
    def ship_dir(self) -> Path:
        return self.project_root / ".ship"

    def chat_dir(self, chat_key: str) -> Path:
        return self.ship_dir / "chats" / encode_chat_key(chat_key)

    def transcript(self, chat_key: str) -> Path:
        """``.ship/chats/<key>/history.jsonl``: the user-visible transcript."""
        return self.chat_dir(chat_key) / "history.jsonl"

    def message_log(self, chat_key: str) -> Path:
        """``.ship/chats/<key>/messages.jsonl``: model messages and compaction records."""
        return self.chat_dir(chat_key) / "messages.jsonl"

    def agent_context(self, chat_key: str) -> Path:
        """``.ship/memory/agent-context/<key>.jsonl``: one execution summary per run."""
        return self.ship_dir / "memory" / "agent-context" / f"{encode_chat_key(chat_key)}.jsonl"

    def context_dir(self, chat_key: str) -> Path:
        """``.ship/context/<key>/``: the chat's context files (spilled output, history, catalog)."""
        return self.ship_dir / "context" / encode_chat_key(chat_key)

    def outputs_dir(self, chat_key: str) -> Path:
        """``.ship/outputs/<key>/``: full outputs of tools (exec_shell) kept on disk."""
        return self.ship_dir / "outputs" / encode_chat_key(chat_key)
