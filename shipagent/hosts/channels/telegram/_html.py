"""The model's Markdown as Telegram HTML (``parse_mode="HTML"``).

Telegram's HTML mode knows a handful of tags (``b i s u code pre a blockquote``) and rejects a
message whose tags do not balance. The model writes CommonMark-ish Markdown. This converter
escapes every ``& < >`` and emits only tags it opened and closed itself, so its output always
parses; what it does not understand stays as literal text. Kept small on purpose (no dependency):
fenced and inline code, bold, italic, strike-through, links, headings (bold), quotes.
"""

from __future__ import annotations

import html
import re

__all__ = ["markdown_to_html"]

_FENCE = re.compile(r"^```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^```[ \t]*$|\Z)", re.S | re.M)
_INLINE = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|(?P<link>\[[^\]\n]+\]\((?:https?|tg|mailto):[^)\s]+\))"
    r"|(?P<bold>\*\*(?=\S)[^\n]+?(?<=\S)\*\*|__(?=\S)[^\n]+?(?<=\S)__)"
    r"|(?P<strike>~~(?=\S)[^\n]+?(?<=\S)~~)"
    r"|(?P<italic>(?<![\w*])\*(?=[^\s*])[^*\n]+?(?<=[^\s*])\*(?![\w*])"
    r"|(?<![\w_])_(?=[^\s_])[^_\n]+?(?<=[^\s_])_(?![\w_]))"
)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _inline(text: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(_esc(text[pos : match.start()]))
        token = match.group(0)
        kind = match.lastgroup
        if kind == "code":
            out.append(f"<code>{_esc(token[1:-1])}</code>")
        elif kind == "link":
            label, _, url = token[1:-1].partition("](")
            out.append(f'<a href="{html.escape(url, quote=True)}">{_inline(label)}</a>')
        elif kind == "bold":
            out.append(f"<b>{_inline(token[2:-2])}</b>")
        elif kind == "strike":
            out.append(f"<s>{_inline(token[2:-2])}</s>")
        else:
            out.append(f"<i>{_inline(token[1:-1])}</i>")
        pos = match.end()
    out.append(_esc(text[pos:]))
    return "".join(out)


def _blocks(text: str) -> str:
    lines: list[str] = []
    quote: list[str] = []

    def end_quote() -> None:
        if quote:
            lines.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote.clear()

    for line in text.split("\n"):
        if line.startswith(">"):
            quote.append(_inline(line[1:].lstrip()))
            continue
        end_quote()
        heading = _HEADING.match(line)
        lines.append(f"<b>{_inline(heading.group(1))}</b>" if heading else _inline(line))
    end_quote()
    return "\n".join(lines)


def markdown_to_html(text: str) -> str:
    """``text`` (Markdown) as Telegram HTML; always balanced, everything else escaped."""
    out: list[str] = []
    pos = 0
    for match in _FENCE.finditer(text):
        out.append(_blocks(text[pos : match.start()]))
        language, code = match.group(1), match.group(2).rstrip("\n")
        attr = f' class="language-{_esc(language)}"' if language else ""
        out.append(f"<pre><code{attr}>{_esc(code)}</code></pre>")
        pos = match.end()
    out.append(_blocks(text[pos:]))
    return "".join(out)
