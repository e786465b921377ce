"""The model's Markdown as Slack's mrkdwn: what renders in Slack, and nothing that breaks it.

Slack does not read Markdown: bold is ``*one star*``, italics ``_underscores_``, strikethrough
``~one tilde~``, links ``<url|label>``, and ``&``, ``<`` and ``>`` must be escaped or Slack takes
them for its own markup. Headings become bold lines and list bullets ``•`` (mrkdwn has neither).
Code (fenced blocks and inline spans) is kept verbatim apart from the escaping, and nothing inside
it is converted; a fence's language tag is dropped (Slack would show it as the first code line).
"""

from __future__ import annotations

import re

__all__ = ["escape", "markdown_to_mrkdwn"]

_FENCE = "```"
_BOLD = "\x02"  # stands for mrkdwn's bold star until the italics are converted
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_AUTOLINK = re.compile(r"&lt;((?:https?|mailto):[^\s&]+)&gt;")
_STRONG = re.compile(r"(\*\*|__)(?!\s)(.+?)(?<!\s)\1")
_EMPHASIS = re.compile(r"(?<![\w*])\*(?![\s*])([^*\n]+?)(?<![\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?!\s)(.+?)(?<!\s)~~")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_QUOTE = re.compile(r"^&gt; ?")


def escape(text: str) -> str:
    """``text`` with the three characters Slack reserves escaped (plain text is sent this way too)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _line(line: str) -> str:
    """One line outside code blocks (its inline code already taken out)."""
    line = escape(line)
    quoted = _QUOTE.match(line)
    prefix = "> " if quoted else ""
    line = line[quoted.end() :] if quoted else line
    heading = _HEADING.match(line)
    if heading:
        line = f"{_BOLD}{heading.group(1)}{_BOLD}"
    line = _BULLET.sub(lambda m: f"{m.group(1)}• ", line)
    line = _LINK.sub(lambda m: f"<{m.group(2).replace('|', '%7C')}|{m.group(1)}>", line)
    line = _AUTOLINK.sub(r"<\1>", line)
    line = _STRONG.sub(lambda m: f"{_BOLD}{m.group(2)}{_BOLD}", line)
    line = _EMPHASIS.sub(r"_\1_", line)
    line = _STRIKE.sub(r"~\1~", line)
    return prefix + line.replace(_BOLD, "*")


def _prose(text: str) -> str:
    """Text between code blocks: inline code kept as it is, the rest converted line by line."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(f"`{escape(match.group(2).strip('`'))}`")
        return f"\x00{len(spans) - 1}\x00"

    protected = _CODE_SPAN.sub(keep, text)
    converted = "\n".join(_line(line) for line in protected.split("\n"))
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], converted)


def markdown_to_mrkdwn(text: str) -> str:
    """``text`` (the model's Markdown) as Slack mrkdwn."""
    out: list[str] = []
    prose: list[str] = []
    code: list[str] | None = None  # the lines of the open code block
    for line in text.split("\n"):
        if line.strip().startswith(_FENCE):
            if code is None:
                if prose:
                    out.append(_prose("\n".join(prose)))
                prose, code = [], []
            else:
                out.append(f"{_FENCE}\n{escape(chr(10).join(code))}\n{_FENCE}")
                code = None
        elif code is not None:
            code.append(line)
        else:
            prose.append(line)
    if code is not None:  # an unclosed fence: the rest is code
        out.append(f"{_FENCE}\n{escape(chr(10).join(code))}\n{_FENCE}")
    elif prose:
        out.append(_prose("\n".join(prose)))
    return "\n".join(out)
