"""``.env`` reading and ``${VAR}`` / ``${VAR:-default}`` expansion of config strings.

Expansion happens on the raw JSON tree, before validation, so every error can name the key path
of the string that held the reference. Values are never logged: an error names the *variable*,
not what it expanded to.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["MAX_DEPTH", "check_depth", "expand_tree", "read_dotenv"]

MAX_DEPTH = 64
"""How deeply ship.json may nest. Real configs use under ten levels; the bound keeps the recursive
``${VAR}`` expansion and validation far from Python's recursion limit."""

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def read_dotenv(path: Path) -> dict[str, str]:
    """Read a ``.env`` file: ``KEY=VALUE`` lines, ``#`` comments, optional ``export`` and quotes.

    A missing file is an empty mapping; a malformed line is a ``ConfigError`` naming its line.
    """
    if not path.is_file():
        return {}
    values: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"{path.name}:{lineno}: expected KEY=VALUE", path=f"{path.name}:{lineno}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def _expand_str(text: str, env: Mapping[str, str], path: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(
            f"{path}: environment variable ${{{name}}} is not set (set it, add it to .env, "
            f"or write ${{{name}:-default}})",
            path=path,
        )

    return _REF.sub(repl, text)


def check_depth(node: Any, *, what: str = "ship.json") -> None:
    """Raise ``ConfigError`` if ``node`` nests deeper than :data:`MAX_DEPTH` (checked without recursion)."""
    stack: list[tuple[Any, int, str]] = [(node, 0, "")]
    while stack:
        current, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{what}: nested more than {MAX_DEPTH} levels deep (at {path[:120] or '<root>'}...)",
                path=path[:120] or None,
            )
        if isinstance(current, dict):
            stack.extend((v, depth + 1, f"{path}.{k}" if path else str(k)) for k, v in current.items())
        elif isinstance(current, list):
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(current))


def expand_tree(node: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Return ``node`` with every ``${VAR}`` in its strings expanded; keys are left alone."""
    if isinstance(node, str):
        return _expand_str(node, env, path or "<root>") if "${" in node else node
    if isinstance(node, list):
        return [expand_tree(v, env, f"{path}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, dict):
        return {k: expand_tree(v, env, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    return node


def merged_environment(project_root: Path) -> dict[str, str]:
    """The process environment over the project's ``.env`` (the real environment wins)."""
    env = read_dotenv(project_root / ".env")
    env.update(os.environ)
    return env
