"""The documentation site's generated references follow the code, and its navigation is whole.

``.ci/run`` builds the site with ``mkdocs build --strict``; these tests pin what that build relies
on without needing MkDocs installed: the hook in ``docs/_hooks/reference.py`` renders every key of
ship.json's schema and every command of the CLI, refuses a description of a key that no longer
exists, and every page in ``docs/`` is reachable from the navigation.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest
import typer
import yaml

from shipagent.config import ShipConfig
from shipagent.hosts.cli._app import app
from tests.support.paths import ROOT


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference_hook", ROOT / "docs" / "_hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaf_keys(model: type, prefix: str = "") -> list[str]:
    """Dotted ship.json paths of the schema's fields, as the reference names them."""
    keys = []
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        alias = field.alias or name
        if alias == "$schema":
            continue
        path = f"{prefix}{alias}"
        annotation = field.annotation
        if isinstance(annotation, typing.ForwardRef):  # a model defined later in its module
            annotation = vars(sys.modules[model.__module__])[annotation.__forward_arg__]
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            keys += _leaf_keys(annotation, f"{path}.")
        else:
            keys.append(path)
    return keys


def test_the_ship_json_reference_names_every_key_of_the_schema() -> None:
    page = _hook().ship_json_reference()
    documented = set(re.findall(r"^\| `([^`]+)` \|", page, flags=re.M))
    missing = [
        k
        for k in _leaf_keys(ShipConfig)
        if k not in documented
        and not k.startswith(("mcp.", "profiles"))
        and not any(d.startswith(f"{k}.<name>.") for d in documented)  # a map of objects: its rows
    ]
    assert missing == []
    assert {
        "mcp.servers.<name>.command",
        "mcp.servers.<name>.url",
        "profiles.<name>.instructions",
    } <= documented
    assert "| `llm.maxRetries` | integer (≥ 0, ≤ 10) | `1` |" in page


def test_a_description_of_a_key_the_schema_lacks_stops_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _hook()
    meanings = yaml.safe_load(hook.MEANINGS.read_text(encoding="utf-8"))
    meanings["llm.retries"] = "a key that was renamed"
    stale = tmp_path / "meanings.yml"
    stale.write_text(yaml.safe_dump(meanings), encoding="utf-8")
    monkeypatch.setattr(hook, "MEANINGS", stale)
    with pytest.raises(hook.DocsReferenceError, match=r"llm\.retries"):
        hook.ship_json_reference()


def test_the_cli_reference_documents_every_command_and_option() -> None:
    page = _hook().cli_reference()
    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="shipagent")
    for name in root.list_commands(ctx):  # type: ignore[attr-defined]
        assert f"## `shipagent {name}`" in page, name
    assert "### `shipagent mcp list`" in page and "### `shipagent context export`" in page
    assert "| `--executor-id` |" in page and "| `--no-worker` |" in page


def test_blocks_not_run_show_why_on_the_site() -> None:
    markdown = "Text\n\n<!-- manual: needs the server above running -->\n```sh\ncurl -s x\n```\n"
    hook = _hook()
    rendered = hook.on_page_markdown(markdown)
    assert '```sh title="Run it yourself: needs the server above running"' in rendered
    assert "<!--" not in rendered
    unknown = "<!-- generated: nothing -->\n"
    with pytest.raises(hook.DocsReferenceError):
        hook.on_page_markdown(unknown)


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))

    def pages(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [p for item in node for p in pages(item)]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        return []

    listed = set(pages(config["nav"]))
    on_disk = {
        p.relative_to(ROOT / "docs").as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if "_hooks" not in p.parts
    }
    assert on_disk == listed


def test_the_python_reference_covers_the_public_api() -> None:
    import shipagent

    page = (ROOT / "docs" / "reference" / "python.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: shipagent\.(\w+)$", page, flags=re.M))
    assert documented == set(shipagent.__all__)
