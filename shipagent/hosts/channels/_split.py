"""Splitting a long Markdown answer into messages a platform accepts, without breaking a code block.

A chat platform caps a message's length (Telegram: 4,096 characters). Cutting an answer at the cap
would leave a code fence open in one piece and a stray one in the next, and the rendered result
would be garbage. So the cut goes at a paragraph, then a line, then a space; a piece that ends
inside a code block gets its fence closed, and the next piece reopens it with the same language.
Every piece is valid Markdown on its own and at most ``limit`` characters long.
"""

from __future__ import annotations

__all__ = ["split_markdown"]

_FENCE = "```"


def _fence_of(line: str) -> str | None:
    """The fence's info string (``""`` for none) if ``line`` opens or closes a code block."""
    stripped = line.strip()
    return stripped[3:].strip() if stripped.startswith(_FENCE) else None


def _cut(text: str, limit: int) -> int:
    """Where to cut ``text`` (longer than ``limit``): the last newline or space, else hard."""
    for sep in ("\n\n", "\n", " "):
        at = text.rfind(sep, 0, limit)
        if at > limit // 4:
            return at + len(sep)
    return limit


def split_markdown(text: str, limit: int) -> list[str]:
    """``text`` as pieces of at most ``limit`` characters, each with balanced code fences."""
    if limit < 32:
        raise ValueError("limit must be at least 32 characters")
    if len(text) <= limit:
        return [text] if text.strip() else []
    pieces: list[str] = []
    current = ""
    language: str | None = None  # the open code block's info string, or None outside one

    def room() -> int:  # characters left, keeping space to close an open fence
        return limit - len(current) - (len("\n" + _FENCE) if language is not None else 0)

    def flush() -> None:
        nonlocal current
        body = current.rstrip("\n")
        if language is not None:
            body += "\n" + _FENCE
        if body.strip() and body.strip() != _FENCE:
            pieces.append(body)
        current = "" if language is None else f"{_FENCE}{language}\n"

    for line in text.splitlines(keepends=True):
        fence = _fence_of(line)
        while len(line) > room():
            fresh = not current.strip() or current == f"{_FENCE}{language}\n"
            if not fresh and (len(line) <= limit // 2 or fence is not None):
                flush()  # the line fits a fresh piece: cut before it
                continue
            at = _cut(line, max(room(), 1))
            current += line[:at]
            line = line[at:]
            flush()
        current += line
        if fence is not None:
            language = fence if language is None else None
    if current.strip():
        body = current.rstrip("\n")
        if language is not None:
            body += "\n" + _FENCE
        pieces.append(body)
    return pieces
