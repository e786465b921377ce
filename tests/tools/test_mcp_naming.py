"""The pure parts of MCP support: exposed names, result rendering, secret masking."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import mcp_types
import pytest

from shipagent.config import load_config
from shipagent.errors import ConfigError
from shipagent.tools.mcp._naming import assign_names, exposed_name
from shipagent.tools.mcp._redact import Redactor, safe_url
from shipagent.tools.mcp._results import convert_result

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


# -- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("time", "get_current_time", "time__get_current_time"),
        ("weather", "weather.get:current", "weather__weather_get_current"),
        ("fs", "read file/üñí", "fs__read_file____"),
        ("git-hub", "list-issues", "git-hub__list-issues"),
    ],
)
def test_exposed_name_sanitizes(server: str, tool: str, expected: str) -> None:
    assert exposed_name(server, tool) == expected
    assert OPENAI_NAME.match(expected)


def test_long_names_get_a_stable_hash_suffix() -> None:
    tool = "summarize_quarterly_revenue_by_region_and_product_line_including_forecasts_v2024"
    name = exposed_name("reports", tool)
    assert len(name) == 64 and OPENAI_NAME.match(name)
    assert name.startswith(f"reports__{tool}"[:55] + "_")
    assert re.fullmatch(r"[0-9a-f]{8}", name[-8:])
    assert exposed_name("reports", tool) == name  # stable across calls (and restarts: no salt)
    # two long names sharing their first 55 characters stay apart
    assert exposed_name("reports", tool + "_b") != exposed_name("reports", tool + "_c")


def test_exactly_64_characters_is_kept_as_is() -> None:
    tool = "x" * (64 - len("s__"))
    assert exposed_name("s", tool) == f"s__{tool}"


def test_collision_names_both_tools_and_servers() -> None:
    with pytest.raises(ConfigError) as caught:
        assign_names([("api", "get.user"), ("api", "get:user")])
    assert str(caught.value) == (
        "MCP tool name collision: tool 'get.user' of server 'api' and tool 'get:user' of server 'api' "
        "would both be exposed as 'api__get_user'; hide one with mcp.servers.<name>.allowedTools "
        "or rename a server"
    )


def test_assign_names_keeps_original_names_for_the_server() -> None:
    [entry] = assign_names([("w", "weather.get:current")])
    assert (entry.server, entry.original, entry.exposed) == (
        "w",
        "weather.get:current",
        "w__weather_get_current",
    )


# -- results --------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_text_is_joined_and_binary_becomes_placeholders() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="first"),
            mcp_types.ImageContent(type="image", data=_b64(b"x" * 50_000), mime_type="image/jpeg"),
            mcp_types.AudioContent(type="audio", data=_b64(b"abc"), mime_type="audio/wav"),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(
                    uri="file:///a.txt", text="héllo", mime_type="text/plain"
                ),
            ),
            mcp_types.ResourceLink(
                type="resource_link", uri="file:///b.csv", name="b.csv", mime_type="text/csv"
            ),
            mcp_types.TextContent(type="text", text="last"),
        ]
    )
    assert convert_result(result, tool="s__t", server="s") == (
        "first\n[image: image/jpeg, 48.8 KiB]\n[audio: audio/wav, 3 bytes]\n"
        "[embedded resource file:///a.txt: text/plain, 6 bytes]\n"
        "[resource link file:///b.csv (b.csv), text/csv]\nlast"
    )


def test_structured_content_is_used_only_without_content_blocks() -> None:
    only = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    both = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text='{"n": 1}')], structured_content={"n": 1}
    )
    assert convert_result(only, tool="s__t", server="s") == '{"n": 1}'
    assert convert_result(both, tool="s__t", server="s") == '{"n": 1}'


def test_is_error_becomes_a_failure_dict() -> None:
    failed = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="nope")], is_error=True
    )
    empty = mcp_types.CallToolResult(content=[], is_error=True)
    assert convert_result(failed, tool="s__t", server="s") == {"success": False, "error": "nope"}
    assert convert_result(empty, tool="s__t", server="s") == {
        "success": False,
        "error": "MCP tool 's__t' of server 's' reported an error without a message",
    }


# -- secrets --------------------------------------------------------------------------------------


def test_safe_url_drops_credentials_and_query() -> None:
    assert safe_url("https://user:pw@example.com:8443/mcp?key=abc#frag") == "https://example.com:8443/mcp"


def test_redactor_masks_values_from_vars_env_headers_and_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_abcdef123456")
    (tmp_path / "ship.json").write_text(
        json.dumps(
            {
                "mcp": {
                    "servers": {
                        "gh": {"command": "gh-mcp", "args": ["--token", "${GH_TOKEN}"]},
                        "api": {
                            "type": "http",
                            "url": "https://api.example.com/mcp?key=qk-998877",
                            "headers": {"X-Api-Key": "hk-112233"},
                        },
                        "local": {"command": "srv", "env": {"DB_PASSWORD": "pw-445566"}},
                    }
                }
            }
        )
    )
    config = load_config(tmp_path)
    redact = Redactor.for_project(tmp_path, config.mcp.servers.values())
    text = "failed: ghp_abcdef123456 / qk-998877 / hk-112233 / pw-445566 / srv"
    assert redact(text) == "failed: *** / *** / *** / *** / srv"
