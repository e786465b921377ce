"""Prompt templates: markdown files shipped in ``shipagent/prompts`` with ``{{var}}`` placeholders.

Prompt text lives in files rather than Python strings so it can be read and reviewed as prose.
Rendering is a single pass: a value that itself contains ``{{x}}`` (a tool description, a user's
agent name) is inserted verbatim, never expanded again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

from ...errors import NotFoundError

__all__ = ["load_template", "render_template"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def _prompts_dir() -> resources.abc.Traversable:
    return resources.files("shipagent").joinpath("prompts")


@cache
def _read(name: str) -> str:
    return _prompts_dir().joinpath(f"{name}.md").read_text(encoding="utf-8")


def load_template(name: str) -> str:
    """The text of ``shipagent/prompts/<name>.md`` (``name`` with or without ``.md``).

    Raises:
        NotFoundError: no such template; the message lists the ones that exist.
    """
    stem = name.removesuffix(".md")
    if not _NAME.fullmatch(stem):
        raise NotFoundError(f"prompt template name {name!r} is not a plain file name")
    if not _prompts_dir().joinpath(f"{stem}.md").is_file():
        available = sorted(
            entry.name.removesuffix(".md") for entry in _prompts_dir().iterdir() if entry.name.endswith(".md")
        )
        raise NotFoundError(
            f"prompt template {stem!r} not found in shipagent/prompts "
            f"(available: {', '.join(available) or 'none'})"
        )
    return _read(stem)


def render_template(template: str, vars: Mapping[str, object]) -> str:
    """Replace each ``{{name}}`` with ``str(vars[name])``; unknown placeholders stay as written."""

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        return str(vars[key]) if key in vars else match.group(0)

    return _PLACEHOLDER.sub(substitute, template)
