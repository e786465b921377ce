"""ship.json: defaults, every ConfigError path, ${VAR} expansion, .env, mcp.json merge, schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipagent import ConfigError, ShipAgent, ShipAgentError, ShipConfig, load_config
from tests.support.core import ScriptedModel


def write(root: Path, data: Any, name: str = "ship.json") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    return root


def config_error(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert isinstance(info.value, ShipAgentError)
    return info.value


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SHIP_TEST_KEY", "SHIP_TEST_MODEL", "SHIP_TEST_MISSING", "SHIP_TEST_URL"):
        monkeypatch.delenv(name, raising=False)


def test_defaults_without_ship_json(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    history = config.context.chat_history
    assert (history.in_memory_max_messages, history.compact_keep_last_messages) == (400, 12)
    assert history.summarizer == "auto" and config.context.cache.ttl_seconds is None
    assert history.max_history_tokens == 32000
    assert config.context.agent_context.window_entries == 200
    assert config.context.injection.max_injected_messages == 120
    assert config.llm.model is None and config.mcp.servers == {}


def test_camel_case_keys_and_schema_key(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "$schema": "./ship.schema.json",
            "name": "demo",
            "description": "a demo agent",
            "llm": {
                "model": "openai:gpt-5-mini",
                "provider": "openai-compatible",
                "baseUrl": "http://localhost:11434/v1",
                "apiKey": "sk-test",
                "temperature": 0.2,
                "maxTokens": 512,
                "timeoutSeconds": 30,
            },
            "context": {
                "chatHistory": {
                    "inMemoryMaxMessages": 40,
                    "compactKeepLastMessages": 10,
                    "maxHistoryTokens": 9000,
                },
                "agentContext": {"windowEntries": 50},
                "injection": {"maxInjectedMessages": 7},
            },
        },
    )
    config = load_config(tmp_path)
    assert config.name == "demo" and config.schema_ == "./ship.schema.json"
    assert config.llm.base_url == "http://localhost:11434/v1" and config.llm.max_tokens == 512
    assert config.llm.timeout_seconds == 30 and config.llm.temperature == 0.2
    assert config.context.chat_history.compact_keep_last_messages == 10
    assert config.context.chat_history.max_history_tokens == 9000
    assert config.context.agent_context.window_entries == 50
    assert config.context.injection.max_injected_messages == 7
    assert "sk-test" not in repr(config.llm)


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    write(tmp_path, '{\n  "name": "x",\n  oops: 1\n}\n')
    err = config_error(tmp_path)
    assert "ship.json: invalid JSON at line 3, column 3" in str(err)
    assert err.path is None


def test_trailing_comma_is_invalid_json(tmp_path: Path) -> None:
    write(tmp_path, '{"name": "x",}')
    with pytest.raises(json.JSONDecodeError) as err:  # the column differs across Python versions
        json.loads('{"name": "x",}')
    assert f"line 1, column {err.value.colno}" in str(config_error(tmp_path))


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    write(tmp_path, "[1, 2]")
    assert "top level must be a JSON object" in str(config_error(tmp_path))


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "ship.json").write_bytes(b'{"name": "\xff"}')
    assert "not UTF-8" in str(config_error(tmp_path))


@pytest.mark.parametrize(
    ("data", "path", "suggestion"),
    [
        ({"nmae": "x"}, "nmae", "name"),
        ({"llm": {"modle": "openai:gpt-5-mini"}}, "llm.modle", "model"),
        (
            {"context": {"chatHistory": {"inMemoryMaxMesages": 10}}},
            "context.chatHistory.inMemoryMaxMesages",
            "inMemoryMaxMessages",
        ),
        (
            {"context": {"injection": {"maxInjected": 3}}},
            "context.injection.maxInjected",
            "maxInjectedMessages",
        ),
        ({"mcp": {"servers": {"git": {"command": "uvx", "argz": []}}}}, "mcp.servers.git.argz", "args"),
        ({"mcp": {"servers": {"git": {"comand": "uvx"}}}}, "mcp.servers.git.comand", "command"),
        (
            {"mcp": {"servers": {"web": {"type": "http", "url": "http://x", "headerz": {}}}}},
            "mcp.servers.web.headerz",
            "headers",
        ),
        (
            {"mcp": {"servers": {"web": {"type": "sse", "url": "http://x", "timeoutSecond": 3}}}},
            "mcp.servers.web.timeoutSecond",
            "timeoutSeconds",
        ),
    ],
)
def test_unknown_key_names_path_and_closest_key(
    tmp_path: Path, data: Any, path: str, suggestion: str
) -> None:
    write(tmp_path, data)
    err = config_error(tmp_path)
    assert err.path == path
    assert str(err) == f"ship.json: unknown key '{path}' (did you mean '{suggestion}'?)"


def test_unknown_key_without_a_close_match_lists_the_valid_keys(tmp_path: Path) -> None:
    write(tmp_path, {"context": {"zzzzzz": 1}})
    err = config_error(tmp_path)
    assert err.path == "context.zzzzzz"
    assert "valid keys: chatHistory, agentContext, injection" in str(err)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (
            {"context": {"chatHistory": {"inMemoryMaxMessages": "lots"}}},
            "context.chatHistory.inMemoryMaxMessages",
        ),
        ({"llm": {"temperature": "hot"}}, "llm.temperature"),
        ({"llm": {"temperature": 7}}, "llm.temperature"),
        ({"name": ["a"]}, "name"),
        ({"mcp": {"servers": {"git": {"command": "uvx", "args": "--x"}}}}, "mcp.servers.git.args"),
        ({"mcp": {"servers": {"git": {"command": "uvx", "env": {"A": 1}}}}}, "mcp.servers.git.env.A"),
        ({"skills": {"paths": ["ok", 3]}}, "skills.paths[1]"),
        ({"context": "small"}, "context"),
    ],
)
def test_wrong_type_names_the_key_path(tmp_path: Path, data: Any, path: str) -> None:
    write(tmp_path, data)
    err = config_error(tmp_path)
    assert err.path == path
    assert str(err).startswith(f"ship.json: '{path}': ")


def test_missing_required_key(tmp_path: Path) -> None:
    write(tmp_path, {"mcp": {"servers": {"web": {"type": "http"}}}})
    err = config_error(tmp_path)
    assert err.path == "mcp.servers.web.url" and "is required" in str(err)


def test_missing_variable_names_key_path_and_variable(tmp_path: Path) -> None:
    write(tmp_path, {"llm": {"model": "openai:gpt-5-mini", "apiKey": "${SHIP_TEST_MISSING}"}})
    err = config_error(tmp_path)
    assert err.path == "llm.apiKey"
    assert "llm.apiKey" in str(err) and "${SHIP_TEST_MISSING}" in str(err)
    write(
        tmp_path,
        {"mcp": {"servers": {"git": {"command": "uvx", "args": ["--token", "${SHIP_TEST_MISSING}"]}}}},
    )
    err = config_error(tmp_path)
    assert err.path == "mcp.servers.git.args[1]" and "SHIP_TEST_MISSING" in str(err)


def test_variable_defaults_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        tmp_path,
        {
            "llm": {
                "model": "${SHIP_TEST_MODEL:-openai:gpt-5-mini}",
                "baseUrl": "http://${SHIP_TEST_URL:-localhost}:8080/${SHIP_TEST_URL:-}v1",
                "apiKey": "${SHIP_TEST_KEY:-}",
            }
        },
    )
    config = load_config(tmp_path)
    assert config.llm.model == "openai:gpt-5-mini"
    assert config.llm.base_url == "http://localhost:8080/v1"
    assert config.llm.api_key == ""
    monkeypatch.setenv("SHIP_TEST_MODEL", "anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("SHIP_TEST_KEY", "sk-from-env")
    config = load_config(tmp_path)
    assert config.llm.model == "anthropic:claude-sonnet-4-5" and config.llm.api_key == "sk-from-env"


def test_dotenv_is_read_and_the_real_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, {"llm": {"model": "${SHIP_TEST_MODEL}", "apiKey": "${SHIP_TEST_KEY}"}})
    (tmp_path / ".env").write_text(
        "# comment\nexport SHIP_TEST_MODEL=openai:from-dotenv\nSHIP_TEST_KEY='sk dotenv' \n\n",
        encoding="utf-8",
    )
    config = load_config(tmp_path)
    assert (config.llm.model, config.llm.api_key) == ("openai:from-dotenv", "sk dotenv")
    monkeypatch.setenv("SHIP_TEST_KEY", "sk-real-env")
    assert load_config(tmp_path).llm.api_key == "sk-real-env"


def test_malformed_dotenv_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("GOOD=1\nthis is not an assignment\n", encoding="utf-8")
    err = config_error(tmp_path)
    assert ".env:2" in str(err) and "KEY=VALUE" in str(err)


def test_mcp_json_is_merged(tmp_path: Path) -> None:
    write(tmp_path, {"mcp": {"servers": {"git": {"command": "uvx", "args": ["mcp-server-git"]}}}})
    write(
        tmp_path, {"servers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}, ".ship/mcp/mcp.json"
    )
    servers = load_config(tmp_path).mcp.servers
    assert sorted(servers) == ["git", "time"]
    assert servers["time"].type == "stdio" and servers["time"].args == ["mcp-server-time"]


def test_mcp_json_alone_and_its_errors(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"servers": {"web": {"type": "http", "url": "http://localhost:9/mcp"}}},
        ".ship/mcp/mcp.json",
    )
    assert load_config(tmp_path).mcp.servers["web"].type == "http"
    write(tmp_path, {"servers": []}, ".ship/mcp/mcp.json")
    assert 'expected {"servers"' in str(config_error(tmp_path))
    write(tmp_path, "{nope", ".ship/mcp/mcp.json")
    assert "mcp.json: invalid JSON at line 1, column 2" in str(config_error(tmp_path))
    write(
        tmp_path, {"servers": {"web": {"type": "http", "url": "http://x", "bogus": 1}}}, ".ship/mcp/mcp.json"
    )
    assert config_error(tmp_path).path == "mcp.servers.web.bogus"


def test_server_defined_twice_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, {"mcp": {"servers": {"git": {"command": "uvx"}}}})
    write(tmp_path, {"servers": {"git": {"command": "other"}}}, ".ship/mcp/mcp.json")
    err = config_error(tmp_path)
    assert err.path == "mcp.servers.git"
    assert "defined in both ship.json and .ship/mcp/mcp.json" in str(err)


@pytest.mark.parametrize("name", ["bad name", "a/b", "dots.not.ok", "ünï", ""])
def test_bad_server_name(tmp_path: Path, name: str) -> None:
    write(tmp_path, {"mcp": {"servers": {name: {"command": "uvx"}}}})
    err = config_error(tmp_path)
    assert err.path == f"mcp.servers.{name}"
    assert "letters, digits, '_' and '-'" in str(err)


def test_json_schema(tmp_path: Path) -> None:
    schema = ShipConfig.model_json_schema()
    json.dumps(schema)  # serialisable
    props = schema["properties"]
    assert {"$schema", "name", "llm", "context", "mcp"} <= set(props)
    assert schema.get("additionalProperties") is False
    defs = schema["$defs"]
    assert set(defs["ChatHistoryConfig"]["properties"]) >= {
        "inMemoryMaxMessages",
        "compactKeepLastMessages",
        "maxHistoryTokens",
    }
    assert defs["ChatHistoryConfig"]["properties"]["inMemoryMaxMessages"]["default"] == 400
    assert defs["LlmConfig"]["additionalProperties"] is False
    assert "baseUrl" in defs["LlmConfig"]["properties"]


def test_from_project_raises_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ShipAgent.from_project(tmp_path / "missing")
    write(tmp_path, {"nmae": "x"})
    with pytest.raises(ConfigError, match="did you mean 'name'"):
        ShipAgent.from_project(tmp_path, model=ScriptedModel().model)


@pytest.mark.anyio
async def test_run_without_a_model_is_a_config_error(tmp_path: Path) -> None:
    agent = ShipAgent.from_project(tmp_path)  # no llm.model, no override
    with pytest.raises(ConfigError) as info:
        await agent.run("k", "hi")
    assert info.value.path == "llm.model"
    assert not (tmp_path / ".ship" / "chats").exists()


@pytest.mark.parametrize(
    ("llm", "provider", "sent"),
    [
        # Ollama's tags carry a colon: with llm.provider set, the whole name is the model's
        (
            {"provider": "openai-compatible", "baseUrl": "http://127.0.0.1:11434/v1", "model": "qwen2.5:7b"},
            "openai-compatible",
            "qwen2.5:7b",
        ),
        (
            {"provider": "ollama", "baseUrl": "http://127.0.0.1:11434/v1", "model": "llama3.2:3b"},
            "ollama",
            "llama3.2:3b",
        ),
        # a known provider before the colon still chooses the provider
        (
            {
                "provider": "openai-compatible",
                "baseUrl": "http://127.0.0.1:1/v1",
                "apiKey": "k",
                "model": "openai:gpt-5-mini",
            },
            "openai",
            "gpt-5-mini",
        ),
    ],
)
def test_a_colon_after_no_known_provider_belongs_to_the_model_name(
    llm: dict[str, Any], provider: str, sent: str
) -> None:
    from pydantic_ai.models.wrapper import WrapperModel

    from shipagent.agent.models import build_model, model_provider
    from shipagent.config import parse_config

    config = parse_config({"llm": llm})
    model = build_model(config.llm)
    assert model_provider(config.llm) == provider
    inner = model.wrapped if isinstance(model, WrapperModel) else model
    assert inner.model_name == sent
