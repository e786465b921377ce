"""User tools: the README's example module run verbatim, ship.json ``tools.modules``, and its errors."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import SystemPromptPart

from shipagent.config import parse_config
from shipagent.errors import ConfigError
from shipagent.tools import load_tool_modules
from tests.support.paths import ROOT
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

pytestmark = pytest.mark.anyio
EXAMPLE = ROOT / "examples" / "glossary_tool.py"
README = ROOT / "docs" / "guides/tools.md"


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """Forget modules a test imported from its temporary project, so tests stay independent."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


async def test_the_example_tool_injects_the_glossary_through_tools_modules(
    tmp_path: Path, fresh_modules: None
) -> None:
    root = make_project(tmp_path / "p", {"tools": {"modules": ["glossary_tool"]}})
    shutil.copy(EXAMPLE, root / "glossary_tool.py")  # the file verbatim, beside ship.json
    (root / "GLOSSARY.md").write_text("- **SLO**: the latency target, 300 ms p99.\n", encoding="utf-8")
    script = Script([Call("glossary_load"), Call("glossary_load"), "The SLO is 300 ms p99."])
    result = await make_agent(root, script).run("api:chat:g", "what is our SLO?")

    assert result.success and result.output == "The SLO is 300 ms p99."
    first, second = tool_results(script.requests[2], "glossary_load")
    assert first == {"success": True, "inserted": 1, "reason": None}
    assert second == {"success": True, "inserted": 0, "reason": "duplicate"}
    top = script.requests[2][0].parts[0]
    assert isinstance(top, SystemPromptPart)
    assert top.content == "Project glossary:\n- **SLO**: the latency target, 300 ms p99.\n"


async def test_the_example_tool_reports_a_missing_glossary_as_data(
    tmp_path: Path, fresh_modules: None
) -> None:
    root = make_project(tmp_path / "p", {"tools": {"modules": ["glossary_tool"]}})
    shutil.copy(EXAMPLE, root / "glossary_tool.py")
    script = Script([Call("glossary_load"), "no glossary"])
    result = await make_agent(root, script).run("api:chat:g", "what is our SLO?")
    assert result.success and result.had_tool_failure
    assert tool_results(script.requests[1], "glossary_load") == [
        {"success": False, "error": "this project has no GLOSSARY.md"}
    ]


def test_the_readme_shows_the_example_verbatim() -> None:
    readme = README.read_text(encoding="utf-8")
    if "## Write your own tool" not in readme:
        pytest.fail(f"{README} lost its section")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme


def test_missing_module_is_a_config_error_naming_the_entry(tmp_path: Path, fresh_modules: None) -> None:
    (tmp_path / "good_tools.py").write_text(
        "from pydantic_ai import FunctionToolset\ntoolset = FunctionToolset()\n"
    )
    assert (
        len(load_tool_modules(parse_config({"tools": {"modules": ["good_tools"]}}), project_root=tmp_path))
        == 1
    )
    config = parse_config({"tools": {"modules": ["good_tools", "no_such_module_xyz"]}})
    with pytest.raises(ConfigError) as caught:
        load_tool_modules(config, project_root=tmp_path)
    assert caught.value.path == "tools.modules[1]"
    assert "cannot import 'no_such_module_xyz'" in str(caught.value)


def test_module_without_a_toolset_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_tool_modules(parse_config({"tools": {"modules": ["json"]}}))
    assert caught.value.path == "tools.modules[0]"
    assert "has no 'toolset'" in str(caught.value)


def test_toolset_of_the_wrong_type_is_a_config_error(tmp_path: Path, fresh_modules: None) -> None:
    (tmp_path / "bad_tools.py").write_text("toolset = [print]\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"tools.modules\[0\]: 'bad_tools.toolset' is a list, not a pydantic-ai toolset"
    ):
        load_tool_modules(parse_config({"tools": {"modules": ["bad_tools"]}}), project_root=tmp_path)
    assert str(tmp_path.resolve()) not in sys.path  # the project root is on sys.path only while importing


def test_from_project_fails_early_on_a_bad_module(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"tools": {"modules": ["nope_not_here"]}})
    with pytest.raises(ConfigError, match=r"tools.modules\[0\]"):
        make_agent(root, Script([]))


def test_a_file_beside_ship_json_never_shadows_a_standard_module(tmp_path: Path, fresh_modules: None) -> None:
    """A command may leave ``colorsys.py`` in the project; the tools module still gets the stdlib's."""
    root = make_project(tmp_path / "p", {"tools": {"modules": ["shade_tools"]}})
    (root / "colorsys.py").write_text("raise RuntimeError('the planted colorsys ran')\n", encoding="utf-8")
    (root / "shade_tools.py").write_text(
        "import colorsys\nfrom pydantic_ai import FunctionToolset\ntoolset = FunctionToolset()\n",
        encoding="utf-8",
    )
    sys.modules.pop("colorsys", None)  # imported for the first time by the tools module
    load_tool_modules(parse_config({"tools": {"modules": ["shade_tools"]}}), project_root=root)
    assert Path(sys.modules["colorsys"].__file__ or "").parent != root
