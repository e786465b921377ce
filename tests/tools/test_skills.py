"""Skills in the public Agent Skills format: discovery, problems, the overview, skills_list/skills_load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic_ai.messages import SystemPromptPart

from shipagent.config import parse_config
from shipagent.tools.skills import discover_skills, find_skill, render_skills_overview, scan_skills
from tests.support.paths import ROOT
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

pytestmark = pytest.mark.anyio
REPO_SKILLS = ROOT / "skills"
KEY = "api:chat:skills"


def write_skill(root: Path, dirname: str, front: str, body: str = "Do the thing.\n") -> Path:
    path = root / dirname / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}---\n\n{body}", encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with the repository's real skills plus a few of its own in both default roots."""
    root = make_project(tmp_path / "proj")
    shutil.copytree(REPO_SKILLS, root / "skills")
    write_skill(
        root / "skills",
        "pdf-forms",
        "name: pdf-forms\ndescription: Fill in PDF forms.\nallowed-tools: exec_shell Read\n",
    )
    write_skill(
        root / ".claude" / "skills",
        "code-review",
        "name: code-review\ndescription: >\n  Review a diff for bugs\n  and style.\nallowed-tools: [exec_shell, chat_send]\n",
    )
    write_skill(root / "skills", ".hidden", "name: hidden\ndescription: never listed\n")
    write_skill(root / "skills", "broken", "name: [unclosed\ndescription: x\n")
    write_skill(root / "skills", "nameless", "description: has no name\n")
    (root / "skills" / "no-front").mkdir()
    (root / "skills" / "no-front" / "SKILL.md").write_text("# Just markdown\n", encoding="utf-8")
    (root / "skills" / "not-a-skill").mkdir()  # no SKILL.md: ignored silently
    return root


def test_discovers_a_real_skills_directory_sorted_and_skipping_hidden_and_broken(project: Path) -> None:
    scan = scan_skills(project, parse_config({}))
    assert [s.id for s in scan.skills] == ["code-review", "git-change-summary", "pdf-forms"]
    by_id = {s.id: s for s in scan.skills}
    assert by_id["pdf-forms"].allowed_tools == ("exec_shell", "Read")
    assert by_id["code-review"].allowed_tools == ("exec_shell", "chat_send")
    assert by_id["code-review"].description == "Review a diff for bugs and style."
    assert by_id["git-change-summary"].allowed_tools == ("exec_shell",)
    problems = {p.path.parent.name: p.message for p in scan.problems}
    assert set(problems) == {"broken", "nameless", "no-front"}
    assert "not valid YAML" in problems["broken"]
    assert "lacks 'name'" in problems["nameless"]
    assert "no front matter" in problems["no-front"]


def test_configured_paths_inside_are_used_and_outside_are_refused_unless_allowed(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    write_skill(root / "team-skills", "deploy", "name: deploy\ndescription: Deploy the app.\n")
    outside = tmp_path / "elsewhere"
    write_skill(outside, "secrets", "name: secrets\ndescription: Outside skill.\n")

    config = parse_config({"skills": {"paths": ["team-skills", str(outside)]}})
    scan = scan_skills(root, config)
    assert [s.id for s in scan.skills] == ["deploy"]
    assert any("skills.paths[1]" in p.message and "allowExternalPaths" in p.message for p in scan.problems)

    allowed = parse_config({"skills": {"paths": ["team-skills", str(outside)], "allowExternalPaths": True}})
    assert [s.id for s in discover_skills(root, allowed)] == ["deploy", "secrets"]


def test_duplicate_ids_first_root_wins_and_is_reported(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    write_skill(root / "skills", "lint", "name: lint\ndescription: from skills/\n")
    write_skill(root / ".claude" / "skills", "lint", "name: lint\ndescription: from .claude/\n")
    scan = scan_skills(root, parse_config({}))
    assert [(s.id, s.description) for s in scan.skills] == [("lint", "from skills/")]
    assert any("duplicate skill id 'lint'" in p.message for p in scan.problems)


def test_find_skill_matches_id_then_name_then_substring(project: Path) -> None:
    skills = discover_skills(project, parse_config({}))
    assert getattr(find_skill(skills, "pdf-forms"), "id", None) == "pdf-forms"
    assert getattr(find_skill(skills, "CODE-REVIEW"), "id", None) == "code-review"
    assert getattr(find_skill(skills, "git-change"), "id", None) == "git-change-summary"
    assert find_skill(skills, "nothing-like-it") is None
    ambiguous = find_skill(skills, "-")
    assert isinstance(ambiguous, list) and len(ambiguous) == 3


def test_overview_lists_name_and_description_up_to_the_limit(project: Path) -> None:
    skills = discover_skills(project, parse_config({}))
    text = render_skills_overview(skills, limit=2)
    assert "- code-review — Review a diff for bugs and style." in text
    assert "- git-change-summary — Summarise what changed" in text
    assert "pdf-forms" not in text and "… and 1 more" in text
    assert "skills_load" in text
    assert render_skills_overview([]) == ""


async def test_the_overview_is_in_the_instructions_of_a_run(project: Path) -> None:
    script = Script(["hi"])
    await make_agent(project, script).run(KEY, "hello")
    instructions = script.infos[0].instructions or ""
    assert "- pdf-forms — Fill in PDF forms." in instructions
    assert instructions.index("Today's date:") < instructions.index("## Skills")


async def test_skills_load_injects_skill_md_as_a_system_block_at_the_top(project: Path) -> None:
    script = Script(
        [
            Call("skills_list"),
            Call("skills_load", {"name": "git-change"}),
            Call("skills_load", {"name": "git-change-summary"}),
            "summary follows",
        ]
    )
    result = await make_agent(project, script).run(KEY, "what changed this week?")

    assert result.success and not result.had_tool_failure
    listed = tool_results(script.requests[1], "skills_list")[0]
    assert [s["id"] for s in listed["skills"]] == ["code-review", "git-change-summary", "pdf-forms"]
    assert listed["skills"][2] == {
        "id": "pdf-forms",
        "name": "pdf-forms",
        "description": "Fill in PDF forms.",
        "allowedTools": ["exec_shell", "Read"],
    }

    request = script.requests[2]
    first = request[0].parts[0]
    assert isinstance(first, SystemPromptPart)
    skill_md = (project / "skills" / "git-change-summary" / "SKILL.md").read_text(encoding="utf-8")
    assert first.content.startswith("[Skill loaded: git-change-summary (id: git-change-summary)]")
    assert first.content.endswith(skill_md)
    loaded = tool_results(request, "skills_load")[0]
    assert loaded == {
        "success": True,
        "inserted": 1,
        "skill": {
            "id": "git-change-summary",
            "name": "git-change-summary",
            "description": loaded["skill"]["description"],
            "path": "skills/git-change-summary/SKILL.md",
        },
    }
    assert "## Steps" not in str(loaded)  # the text is injected once, not returned a second time
    # loading it again in the same run is deduplicated by its fingerprint (id + sha1 of content)
    again = tool_results(script.requests[3], "skills_load")[1]
    assert again["inserted"] == 0 and again["reason"] == "duplicate"
    assert sum(isinstance(p, SystemPromptPart) for m in script.requests[3] for p in m.parts) == 1


async def test_unknown_and_ambiguous_names_fail_as_data(project: Path) -> None:
    script = Script([Call("skills_load", {"name": "kubernetes"}), Call("skills_load", {"name": "-"}), "ok"])
    result = await make_agent(project, script).run(KEY, "x")

    assert result.success and result.had_tool_failure
    first, second = tool_results(script.requests[2], "skills_load")
    assert (
        first["success"] is False
        and "available: code-review, git-change-summary, pdf-forms" in first["error"]
    )
    assert second["success"] is False and "matches several skills" in second["error"]


async def test_skills_added_while_running_are_found_by_refresh_and_by_a_missed_load(project: Path) -> None:
    script = Script(
        [
            Call("skills_list"),
            "ok",
            Call("skills_list", {"refresh": True}),
            "ok",
            Call("skills_load", {"name": "late-two"}),
            "ok",
        ]
    )
    agent = make_agent(project, script)
    await agent.run(KEY, "list")
    write_skill(project / "skills", "late-one", "name: late-one\ndescription: Added later.\n")
    await agent.run(KEY, "list again")
    ids = [s["id"] for s in tool_results(script.requests[-1], "skills_list")[-1]["skills"]]
    assert "late-one" in ids
    write_skill(project / "skills", "late-two", "name: late-two\ndescription: Added even later.\n")
    await agent.run(KEY, "load it")
    assert tool_results(script.requests[-1], "skills_load")[0]["inserted"] == 1


def test_check_report_names_usable_skills_and_each_problem(project: Path) -> None:
    import io

    from rich.console import Console

    from shipagent.tools.skills import skills_check_hook, skills_report

    lines, any_skipped = skills_report(project, parse_config({}))
    assert any_skipped
    assert lines[0] == "skills: 3 usable (code-review, git-change-summary, pdf-forms)"
    assert lines[1] == (
        "skill skipped: skills/broken/SKILL.md: front matter is not valid YAML at line 3: "
        "expected ',' or ']', but got ':'"
    )
    buffer = io.StringIO()
    skills_check_hook(project, parse_config({}), Console(file=buffer, width=300))
    assert "skills/nameless/SKILL.md: front matter lacks 'name'" in buffer.getvalue()


def test_format_warnings_keep_the_skill_and_long_descriptions_are_cut_in_the_overview(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    write_skill(root / "skills", "Big_Skill", f"name: Big_Skill\ndescription: {'word ' * 300}\n")
    scan = scan_skills(root, parse_config({}))
    assert [s.id for s in scan.skills] == ["Big_Skill"]
    warnings = [p.message for p in scan.problems if not p.skipped]
    assert any("not 1-64 lowercase letters" in w for w in warnings)
    assert any("description is 1499 characters" in w for w in warnings)
    line = render_skills_overview(scan.skills).splitlines()[-1]
    assert line.startswith("- Big_Skill — word word") and line.endswith("…") and len(line) < 330
