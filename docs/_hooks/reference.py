"""MkDocs hook: the generated reference pages.

The ship.json and CLI references are written by this hook at build time from the code itself —
``ShipConfig.model_json_schema(by_alias=True)`` and the typer app — so they cannot drift from
what the program accepts. A page asks for a generated part with a marker line:

    <!-- generated: ship.json -->
    <!-- generated: cli -->

A block marked ``<!-- fragment: why -->`` or ``<!-- manual: why -->`` (see
``tests/docs/test_readme_runnable.py``) gets the reason as its visible title.

The meaning of each ship.json key comes from ``ship_json_meanings.yml`` beside this file; a key
there that the schema does not have stops the build (with ``--strict`` and without), so a renamed
or removed key cannot keep a stale description.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
import yaml

MEANINGS = Path(__file__).with_name("ship_json_meanings.yml")
MARKER = re.compile(r"^<!-- generated: (?P<what>[\w.]+) -->$", re.M)


class DocsReferenceError(Exception):
    """A generated reference does not match the code (a stale meaning, an unknown marker)."""


# --- ship.json ---------------------------------------------------------------------------------


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    return node


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    node = _resolve(node, defs)
    if "anyOf" in node:
        kinds = [_type(n, defs) for n in node["anyOf"] if n.get("type") != "null"]
        return " or ".join(kinds)
    if "oneOf" in node:
        return "object"
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    kind = node.get("type", "object")
    if kind == "array":
        return f"list of {_type(node.get('items', {}), defs)}"
    return str(kind)


def _bounds(node: dict[str, Any]) -> str:
    for n in [node, *node.get("anyOf", [])]:
        parts = []
        if "minimum" in n:
            parts.append(f"≥ {n['minimum']}")
        if "exclusiveMinimum" in n:
            parts.append(f"> {n['exclusiveMinimum']}")
        if "maximum" in n:
            parts.append(f"≤ {n['maximum']}")
        if "minLength" in n:
            parts.append(f"at least {n['minLength']} characters")
        if parts:
            return ", ".join(parts)
    return ""


def _object_variants(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a value may be: one, or each variant of a union (MCP servers)."""
    node = _resolve(node, defs)
    variants = node.get("oneOf") or node.get("anyOf") or [node]
    return [v for v in (_resolve(v, defs) for v in variants) if "properties" in v]


def _rows(
    node: dict[str, Any], defs: dict[str, Any], path: str, rows: list[tuple[str, dict[str, Any]]]
) -> None:
    seen: set[str] = set()
    for variant in _object_variants(node, defs):
        for key, field in variant["properties"].items():
            if key in seen or key == "$schema":
                continue
            seen.add(key)
            child = f"{path}.{key}" if path else key
            target = _resolve(field, defs)
            if _object_variants(field, defs):
                _rows(field, defs, child, rows)
            elif "additionalProperties" in target and isinstance(target["additionalProperties"], dict):
                name = "<name>"
                value = target["additionalProperties"]
                if _object_variants(value, defs):
                    rows.append((f"{child}.{name}", {"type": "object"}))
                    _rows(value, defs, f"{child}.{name}", rows)
                else:  # a map of plain values: one row for the map
                    plain = {k: v for k, v in field.items() if k != "additionalProperties"}
                    rows.append((child, {**plain, "type": f"map of {_type(value, defs)}"}))
            else:
                rows.append((child, field))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def ship_json_reference() -> str:
    from shipagent.config import ShipConfig

    schema = ShipConfig.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    meanings: dict[str, str] = yaml.safe_load(MEANINGS.read_text(encoding="utf-8"))
    rows: list[tuple[str, dict[str, Any]]] = []
    _rows(schema, defs, "", rows)
    known = {path for path, _ in rows}
    stale = sorted(set(meanings) - known)
    if stale:
        raise DocsReferenceError(f"{MEANINGS.name} describes keys ship.json does not have: {stale}")
    sections: dict[str, list[str]] = {}
    for path, field in rows:
        default = field.get("default", _resolve(field, defs).get("default"))
        shown = "—" if default is None else f"`{json.dumps(default)}`"
        if "default" not in field and path.count(".") == 0 and "properties" not in field:
            shown = "—"
        kind = _type(field, defs)
        bounds = _bounds(_resolve(field, defs))
        if bounds:
            kind = f"{kind} ({bounds})"
        meaning = meanings.get(path, "")
        top = path.split(".", 1)[0] if "." in path else ""
        sections.setdefault(top, []).append(
            f"| `{path}` | {_cell(kind)} | {_cell(shown)} | {_cell(meaning)} |"
        )
    out: list[str] = []
    for top, lines in sections.items():
        field = schema["properties"].get(top, {})
        doc = _resolve(field, defs).get("description", "") if "$ref" in field else ""
        out.append(f"### `{top}`\n" if top else "### Top level\n")
        if doc:
            out.append(re.sub(r"``([^`]+)``", r"`\1`", doc.split("\n\n")[0]).replace("\n", " ") + "\n")
        out.append("| key | type | default | meaning |\n|---|---|---|---|")
        out.extend(lines)
        out.append("")
    return "\n".join(out)


# --- CLI ---------------------------------------------------------------------------------------


def _command_doc(command: Any, ctx: Any, prefix: str, out: list[str]) -> None:
    name = f"{prefix} {command.name}".strip() if prefix else "shipagent"
    level = "###" if name.count(" ") <= 1 else "####"
    if name != "shipagent":
        out.append(f"{level} `{name}`\n")
    help_text = (command.help or "").strip()
    if help_text:
        text = help_text.split("\f")[0].strip()
        # a list right after a line of text needs a blank line to be a Markdown list
        text = re.sub(r"(?m)^(?!- |  )(.+)\n(?=- )", r"\1\n\n", text)
        out.append(text + "\n")
    usage = " ".join(command.collect_usage_pieces(ctx))
    out.append(f'```text title="usage"\n{name} {usage}\n```\n')
    rows = []
    for param in command.params:
        if param.param_type_name == "argument":
            label = f"`{(param.metavar or param.name or '').upper()}`"
            help_line = getattr(param, "help", "") or ""
        elif param.param_type_name == "option":
            if param.hidden:
                continue
            flags = param.opts + param.secondary_opts
            label = ", ".join(f"`{f}`" for f in flags)
            help_line = param.help or ""
            if param.show_default and param.default not in (None, False, ()):
                help_line += f" (default: `{param.default}`)"
        else:
            continue
        rows.append(f"| {label} | {_cell(help_line.strip())} |")
    if rows:
        out.append("| argument / option | what it does |\n|---|---|")
        out.extend(rows)
        out.append("")
    if hasattr(command, "list_commands"):  # a group (typer vendors its own click classes)
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            sub_ctx = typer.Context(sub, info_name=sub_name, parent=ctx)
            _command_doc(sub, sub_ctx, name, out)


def cli_reference() -> str:
    from shipagent.hosts.cli._app import app

    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="shipagent")
    out: list[str] = []
    _command_doc(root, ctx, "", out)
    return "\n".join(out)


GENERATORS = {"ship.json": ship_json_reference, "cli": cli_reference}

# A block the tests do not run carries its reason in a marker the reader cannot see on GitHub;
# on the site it becomes the block's title ("Fragment: …", "Run it yourself: …").
NOT_RUN = re.compile(
    r"^(?P<indent>[ \t]*)<!-- (?P<kind>fragment|manual): (?P<why>.+?) -->\n(?P=indent)```(?P<lang>[\w-]*)[^\n]*$",
    re.M,
)
TITLES = {"fragment": "Fragment", "manual": "Run it yourself"}


def _titled(match: re.Match[str]) -> str:
    why = match.group("why").replace('"', "'")
    title = f"{TITLES[match.group('kind')]}: {why}"
    return f'{match.group("indent")}```{match.group("lang")} title="{title}"'


def on_page_markdown(markdown: str, **_: Any) -> str:
    def generate(match: re.Match[str]) -> str:
        what = match.group("what")
        if what not in GENERATORS:
            raise DocsReferenceError(f"unknown generated reference {what!r} (known: {sorted(GENERATORS)})")
        return GENERATORS[what]()

    return NOT_RUN.sub(_titled, MARKER.sub(generate, markdown))
