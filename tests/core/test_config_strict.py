"""ship.json scalar types are strict: booleans never become numbers, numbers never booleans or
strings, and every such error names the key path (``shipagent check`` exits 2 with one line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.hosts.cli import _app as cli

runner = CliRunner()


def nest(path: str, value: Any) -> dict[str, Any]:
    """``nest("llm.maxRetries", True)`` -> ``{"llm": {"maxRetries": True}}``."""
    head, _, rest = path.partition(".")
    return {head: nest(rest, value) if rest else value}


REJECTED = [
    # booleans never become numbers
    ("llm.maxRetries", True, "must be a whole number, not true"),
    ("llm.maxTokens", False, "must be a whole number, not false"),
    ("llm.temperature", True, "must be a number, not true"),
    ("llm.timeoutSeconds", True, "must be a number, not true"),
    ("context.chatHistory.inMemoryMaxMessages", True, "must be a whole number, not true"),
    ("context.chatHistory.idleEvictSeconds", False, "must be a number, not false"),
    ("context.budget.sections.history", True, "must be a number, not true"),
    ("serve.maxBodyBytes", True, "must be a whole number, not true"),
    ("handover.maxDepth", True, "must be a whole number, not true"),
    # numbers (and other words) never become booleans
    ("durable.enabled", 1, "must be true or false, not 1"),
    ("context.ledger.enabled", 0, "must be true or false, not 0"),
    ("observability.otel", "yes", 'must be true or false, not "yes"'),
    ("permissions.execShell.network", "1", 'must be true or false, not "1"'),
    ("skills.allowExternalPaths", "on", 'must be true or false, not "on"'),
    # numbers and booleans never become strings
    ("name", 5, "must be a string (in quotes), not 5"),
    ("llm.model", True, "must be a string (in quotes), not true"),
    ("llm.baseUrl", 8080, "must be a string (in quotes), not 8080"),
]


@pytest.mark.parametrize(("key", "value", "message"), REJECTED, ids=[f"{k}={v!r}" for k, v, _ in REJECTED])
def test_a_wrong_scalar_type_is_an_error_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(nest(key, value))
    assert caught.value.path == key
    assert str(caught.value) == f"ship.json: '{key}': {message}"


def test_mcp_server_fields_are_strict_too() -> None:
    for server, key, message in [
        ({"command": "x", "enabled": "no"}, "enabled", 'must be true or false, not "no"'),
        ({"type": "http", "url": "http://127.0.0.1:1", "timeoutSeconds": True}, "timeoutSeconds", "not true"),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_config({"mcp": {"servers": {"git": server}}})
        assert caught.value.path == f"mcp.servers.git.{key}"
        assert message in str(caught.value)


ACCEPTED = [
    ("llm.maxRetries", "3", 3),  # what "${RETRIES}" expands to
    ("llm.maxTokens", 2048.0, 2048),
    ("llm.timeoutSeconds", "30.5", 30.5),
    ("llm.temperature", 0, 0.0),
    ("durable.enabled", "true", True),  # what "${DURABLE}" expands to
    ("context.ledger.enabled", "false", False),
    ("observability.otel", True, True),
]


@pytest.mark.parametrize(("key", "value", "expected"), ACCEPTED, ids=[f"{k}={v!r}" for k, v, _ in ACCEPTED])
def test_numbers_as_digits_and_booleans_as_words_are_accepted(key: str, value: Any, expected: Any) -> None:
    config: Any = parse_config(nest(key, value))
    for part in key.split("."):
        attribute = "".join(f"_{c.lower()}" if c.isupper() else c for c in part)
        config = getattr(config, attribute)
    assert config == expected and type(config) is type(expected)


def test_a_variable_can_hold_a_number_or_a_boolean() -> None:
    config = parse_config(
        {"llm": {"maxRetries": "${RETRIES}"}, "durable": {"enabled": "${DURABLE:-false}"}},
        env={"RETRIES": "4"},
    )
    assert config.llm.max_retries == 4 and config.durable.enabled is False


@pytest.mark.parametrize("value", ["inf", "nan", float("inf"), "-inf"])
def test_numbers_are_finite(value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"llm": {"timeoutSeconds": value}})
    assert caught.value.path == "llm.timeoutSeconds"


@pytest.mark.parametrize(
    ("key", "value"), [("llm.maxRetries", True), ("durable.enabled", 1), ("llm.model", 5)]
)
def test_check_exits_2_with_one_line_naming_the_key(tmp_path: Path, key: str, value: Any) -> None:
    (tmp_path / "ship.json").write_text(json.dumps(nest(key, value)))
    result = runner.invoke(cli.app, ["check", "--offline", "-C", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: ship.json: '{key}': must be ")
    assert result.output.count("\n") == 1 and "ship.json OK" not in result.output
