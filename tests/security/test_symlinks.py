"""Files the runtime reads into a model's context must resolve inside the project.

A symlink out of the project — ``Agent.md`` to a secret, a ``SKILL.md`` to another project's
transcript, a context file to a file elsewhere — is refused with an error naming the file, and the
target's text never reaches the model. A symlink that stays inside the project keeps working.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage

from shipagent.chatkeys import ShipPaths
from shipagent.config import parse_config
from shipagent.hosts.cli._checks import check_project
from shipagent.tools.files import ContextFiles
from shipagent.tools.skills import scan_skills
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

pytestmark = pytest.mark.anyio

KEY = "api:chat:alice"
SECRET = "TOP-SECRET-7f3a9c: the admin key is hunter2"


def _everything_the_model_saw(script: Script) -> str:
    """Every request and the instructions of every request, as one string to search for leaks."""
    seen: list[ModelMessage] = [m for request in script.requests for m in request]
    return repr(seen) + "".join(info.instructions or "" for info in script.infos)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret outside the project, and another project whose transcript holds the secret too."""
    secrets = tmp_path / "host"
    secrets.mkdir()
    (secrets / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    other = ShipPaths(tmp_path / "other-project").transcript("api:chat:bob")
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({"role": "user", "text": SECRET}) + "\n", encoding="utf-8")
    return tmp_path


TARGETS = ["host/secret.txt", "other-project/.ship/chats/api%3Achat%3Abob/history.jsonl"]


def _skill_text(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: The {name} skill.\n---\n\n{body}\n"


# --- Agent.md -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=["host-file", "other-projects-transcript"])
async def test_agent_md_linked_out_of_the_project_fails_the_turn_naming_it(
    outside: Path, target: str
) -> None:
    root = make_project(outside / "p")
    (root / "Agent.md").symlink_to(outside / target)
    script = Script(["hello"])
    result = await make_agent(root, script).run(KEY, "hi")

    assert not result.success
    assert "Agent.md" in result.output and "outside the project" in result.output
    assert SECRET not in result.output
    assert script.requests == []  # the model was never asked, so never shown the target
    problems = check_project(root, include_model=False)
    assert any(p.level == "error" and "Agent.md" in p.message for p in problems), problems


async def test_agent_md_made_a_link_out_after_a_turn_is_refused_on_the_next(outside: Path) -> None:
    root = make_project(outside / "p")
    (root / "Agent.md").write_text("You are the release bot.", encoding="utf-8")
    script = Script(["first", "second"])
    agent = make_agent(root, script)
    assert (await agent.run(KEY, "one")).success
    (root / "Agent.md").unlink()
    (root / "Agent.md").symlink_to(outside / "host" / "secret.txt")

    result = await agent.run(KEY, "two")
    assert not result.success and "Agent.md" in result.output
    assert len(script.requests) == 1 and SECRET not in _everything_the_model_saw(script)


async def test_agent_md_linked_to_a_file_inside_the_project_is_used(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "docs").mkdir()
    (root / "docs" / "role.md").write_text("You are the release bot.", encoding="utf-8")
    (root / "Agent.md").symlink_to(Path("docs") / "role.md")
    script = Script(["hello"])
    result = await make_agent(root, script).run(KEY, "hi")

    assert result.success
    assert (script.infos[0].instructions or "").startswith("You are the release bot.")
    assert check_project(root, include_model=False) == []


# --- skills ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("allow_external", [False, True], ids=["default", "allowExternalPaths"])
@pytest.mark.parametrize("target", TARGETS, ids=["host-file", "other-projects-transcript"])
async def test_a_skill_md_linked_out_of_the_project_is_skipped_naming_it(
    outside: Path, target: str, allow_external: bool
) -> None:
    ship = {"skills": {"allowExternalPaths": allow_external}}
    root = make_project(outside / "p", ship)
    (root / "skills" / "leak").mkdir(parents=True)
    (root / "skills" / "leak" / "SKILL.md").symlink_to(outside / target)
    (root / "skills" / "fine").mkdir()
    (root / "skills" / "fine" / "SKILL.md").write_text(_skill_text("fine", "Be fine."), encoding="utf-8")

    scan = scan_skills(root, parse_config(ship))
    assert [s.id for s in scan.skills] == ["fine"]
    [problem] = scan.problems
    assert problem.path == root / "skills" / "leak" / "SKILL.md"
    assert "SKILL.md" in problem.message and "outside the project" in problem.message

    script = Script([Call("skills_load", {"name": "leak"}), "ok"])
    await make_agent(root, script).run(KEY, "use the leak skill")
    loaded = tool_results(script.requests[1], "skills_load")[0]
    assert loaded["success"] is False
    assert SECRET not in _everything_the_model_saw(script)


async def test_a_skill_md_made_a_link_out_after_discovery_is_refused_when_loaded(outside: Path) -> None:
    root = make_project(outside / "p")
    skill_md = root / "skills" / "deploy" / "SKILL.md"
    skill_md.parent.mkdir(parents=True)
    skill_md.write_text(_skill_text("deploy", "Deploy carefully."), encoding="utf-8")
    script = Script([Call("skills_list"), "listed", Call("skills_load", {"name": "deploy"}), "ok"])
    agent = make_agent(root, script)
    await agent.run(KEY, "what skills are there?")  # discovered and cached
    skill_md.unlink()
    skill_md.symlink_to(outside / "host" / "secret.txt")

    await agent.run(KEY, "deploy")
    loaded = tool_results(script.requests[-1], "skills_load")[0]
    assert loaded["success"] is False
    assert "skill 'deploy' SKILL.md" in loaded["error"] and "outside the project" in loaded["error"]
    assert SECRET not in _everything_the_model_saw(script)


async def test_a_skills_root_linked_out_is_refused_unless_external_paths_are_allowed(outside: Path) -> None:
    external = outside / "shared-skills"
    (external / "deploy").mkdir(parents=True)
    (external / "deploy" / "SKILL.md").write_text(_skill_text("deploy", "Deploy."), encoding="utf-8")
    root = make_project(outside / "p")
    (root / "skills").symlink_to(external)

    refused = scan_skills(root, parse_config({}))
    assert refused.skills == []
    assert [p.path for p in refused.problems] == [root / "skills"]
    assert "skills/ links outside the project" in refused.problems[0].message
    allowed = scan_skills(root, parse_config({"skills": {"allowExternalPaths": True}}))
    assert [s.id for s in allowed.skills] == ["deploy"] and allowed.problems == []


async def test_a_skill_md_linked_to_a_file_inside_the_project_is_loaded(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "docs").mkdir()
    (root / "docs" / "deploy.md").write_text(_skill_text("deploy", "Deploy from docs."), encoding="utf-8")
    (root / "skills" / "deploy").mkdir(parents=True)
    (root / "skills" / "deploy" / "SKILL.md").symlink_to(Path("..") / ".." / "docs" / "deploy.md")
    script = Script([Call("skills_load", {"name": "deploy"}), "ok"])
    await make_agent(root, script).run(KEY, "deploy")

    loaded = tool_results(script.requests[1], "skills_load")[0]
    assert loaded["success"] is True and loaded["inserted"] == 1
    assert "Deploy from docs." in repr(script.requests[1])


# --- context files --------------------------------------------------------------------------------


async def _context_read(root: Path, ref_id: str) -> tuple[dict[str, Any], str]:
    script = Script([Call("context_read", {"id": ref_id}), "ok"])
    await make_agent(root, script).run(KEY, "read it")
    return tool_results(script.requests[1], "context_read")[0], _everything_the_model_saw(script)


@pytest.mark.parametrize("target", TARGETS, ids=["host-file", "other-projects-transcript"])
async def test_a_context_file_linked_out_of_the_project_is_refused_naming_it(
    outside: Path, target: str
) -> None:
    root = make_project(outside / "p")
    files = ContextFiles(ShipPaths(root))
    ref = files.add_artifact(KEY, "harmless build log\n", name="log", source="test")
    path = files.path_of(KEY, ref)
    path.unlink()
    path.symlink_to(outside / target)

    result, seen = await _context_read(root, ref.id)
    assert result["success"] is False
    assert f"context file {ref.id!r}" in result["error"]
    assert SECRET not in seen


async def test_a_chat_context_folder_linked_out_of_the_project_is_refused_naming_the_file(
    outside: Path,
) -> None:
    elsewhere = make_project(outside / "elsewhere")
    theirs = ContextFiles(ShipPaths(elsewhere)).add_artifact(KEY, SECRET + "\n", name="log", source="test")
    root = make_project(outside / "p")
    folder = ContextFiles(ShipPaths(root)).folder(KEY)
    folder.parent.mkdir(parents=True)
    folder.symlink_to(ContextFiles(ShipPaths(elsewhere)).folder(KEY))

    result, seen = await _context_read(root, theirs.id)
    assert result["success"] is False
    assert f"context file {theirs.id!r}" in result["error"] and "outside the project" in result["error"]
    assert SECRET not in seen


async def test_a_context_file_linked_to_another_chats_file_is_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    files = ContextFiles(ShipPaths(root))
    bobs = files.add_artifact("api:chat:bob", SECRET + "\n", name="log", source="test")
    mine = files.add_artifact(KEY, "harmless\n", name="log", source="test")
    path = files.path_of(KEY, mine)
    path.unlink()
    path.symlink_to(files.path_of("api:chat:bob", bobs))

    result, seen = await _context_read(root, mine.id)
    assert result["success"] is False and f"context file {mine.id!r}" in result["error"]
    assert SECRET not in seen


async def test_a_context_file_linked_within_its_chat_folder_is_read(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    files = ContextFiles(ShipPaths(root))
    first = files.add_artifact(KEY, "the real build log\n", name="log", source="test")
    second = files.add_artifact(KEY, "to be replaced\n", name="copy", source="test")
    path = files.path_of(KEY, second)
    path.unlink()
    path.symlink_to(files.path_of(KEY, first).name)  # relative: a sibling in the same folder

    result, _ = await _context_read(root, second.id)
    assert result["success"] is True
    assert "the real build log" in json.dumps(result)
