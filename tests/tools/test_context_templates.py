"""Prompt templates: package data with {{var}} placeholders."""

from __future__ import annotations

import pytest

from shipagent.errors import NotFoundError
from shipagent.tools.context._templates import load_template, render_template


def test_render_replaces_known_and_leaves_unknown_placeholders_as_written() -> None:
    text = render_template("Hi {{name}}, {{ name }}! {{unknown}} {{ missing }} {name}", {"name": "Ada"})
    assert text == "Hi Ada, Ada! {{unknown}} {{ missing }} {name}"


def test_render_is_single_pass_so_values_are_never_expanded_again() -> None:
    text = render_template("{{a}} / {{b}}", {"a": "{{b}}", "b": "secret"})
    assert text == "{{b}} / secret"


def test_render_converts_values_to_str() -> None:
    assert render_template("{{n}} tools", {"n": 3}) == "3 tools"


def test_load_template_reads_the_shipped_prompts_with_or_without_suffix() -> None:
    identity = load_template("core-identity")
    assert identity == load_template("core-identity.md")
    for var in ("agentName", "archetype", "archetypeDescription", "backendType", "workspacePolicy"):
        assert "{{" + var + "}}" in identity
    instructions = load_template("tool-instructions")
    assert "{{toolList}}" in instructions and "{{token}}" in instructions


def test_missing_template_is_a_clear_error_listing_what_exists() -> None:
    with pytest.raises(NotFoundError) as info:
        load_template("no-such-prompt")
    message = str(info.value)
    assert "'no-such-prompt' not found in shipagent/prompts" in message
    assert "core-identity" in message and "tool-instructions" in message


@pytest.mark.parametrize("name", ["../config", "a/b", "", ".hidden"])
def test_template_names_cannot_escape_the_prompts_directory(name: str) -> None:
    with pytest.raises(NotFoundError, match="not a plain file name"):
        load_template(name)
