"""Skills: directories with a ``SKILL.md`` in the public Agent Skills format, found and summarised.

A skill is a directory whose ``SKILL.md`` starts with YAML front matter holding ``name``,
``description`` and optionally ``allowed-tools``; the body is instructions the model loads on demand
with ``skills_load``. Only the one-line overview (``name — description``) is in the instructions of
every run, so a project can carry many skills without paying for them in every request.

Discovery never raises on a bad skill: a missing or broken front matter, a duplicate id or a root
outside the project becomes a :class:`SkillProblem` that ``shipagent check`` reports, and the rest
of the skills keep working.

A ``SKILL.md`` is read into the model's context, so it must resolve inside the project: a symlink
out (``skills/x/SKILL.md -> /root/secret``) is refused at discovery and again when the skill is
loaded. ``skills.allowExternalPaths`` admits whole skill directories and roots outside the project
(then the file must stay inside its skill directory), never a single file linked out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._paths import OutsideProjectError, resolve_inside
from ..config import ShipConfig

__all__ = [
    "DEFAULT_SKILL_ROOTS",
    "Skill",
    "SkillProblem",
    "SkillScan",
    "discover_skills",
    "find_skill",
    "parse_skill_file",
    "render_skills_overview",
    "scan_skills",
    "skills_check_hook",
    "skills_report",
]

DEFAULT_SKILL_ROOTS: tuple[str, ...] = ("skills", ".claude/skills")
"""Project-relative directories searched before ``skills.paths`` from ship.json."""

_MAX_SKILL_BYTES = 512 * 1024  # a SKILL.md bigger than this is not instructions, it is a data dump
_NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_DESCRIPTION = 1024
_OVERVIEW_DESCRIPTION = 300  # per skill in every run's instructions: 40 skills stay a few KB


@dataclass(frozen=True, slots=True)
class Skill:
    """One usable skill.

    Attributes:
        id: the skill directory's name; unique within a project (the first root wins).
        name: ``name`` from the front matter.
        description: ``description`` from the front matter (what it does and when to use it).
        allowed_tools: ``allowed-tools`` from the front matter, as a tuple of tool specs.
        path: the ``SKILL.md`` file.
        home: the directory ``SKILL.md`` must resolve inside (the project, or for an external skill
            the config allows, its own directory); ``None`` reads it wherever it leads.
    """

    id: str
    name: str
    description: str
    allowed_tools: tuple[str, ...]
    path: Path
    home: Path | None = None

    @property
    def directory(self) -> Path:
        """The skill's directory: files the SKILL.md mentions are relative to it."""
        return self.path.parent

    def read(self) -> str:
        """The full text of ``SKILL.md`` (read on demand so discovery stays cheap).

        Raises:
            OutsideProjectError: ``SKILL.md`` was made a symlink out of :attr:`home` since discovery.
        """
        path = self.path if self.home is None else resolve_inside(self.home, self.path, self._what)
        return path.read_text(encoding="utf-8-sig")

    @property
    def _what(self) -> str:
        return f"skill '{self.id}' SKILL.md ({self.path})"


@dataclass(frozen=True, slots=True)
class SkillProblem:
    """Something wrong with a skill or a skills root, for ``shipagent check``.

    Attributes:
        path: the file or directory at fault.
        message: what is wrong and how to fix it.
        skipped: True when the skill was not loaded; False for a warning about a loaded skill.
    """

    path: Path
    message: str
    skipped: bool = True


@dataclass(slots=True)
class SkillScan:
    """The result of a scan: the usable skills (sorted by id) and every problem found."""

    skills: list[Skill] = field(default_factory=list)
    problems: list[SkillProblem] = field(default_factory=list)


def _split_front_matter(text: str) -> tuple[str, str] | None:
    """``(yaml, body)`` when ``text`` starts with a ``---`` fenced block, else ``None``."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None


def _allowed_tools(value: Any) -> tuple[str, ...] | str:
    """Normalise ``allowed-tools`` (a space/comma separated string or a list) or say what is wrong."""
    if value is None:
        return ()
    if isinstance(value, str):
        sep = "," if "," in value else None
        return tuple(part.strip() for part in value.split(sep) if part.strip())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(item.strip() for item in value if item.strip())
    return "'allowed-tools' must be a string or a list of strings"


def parse_skill_file(skill_md: Path) -> Skill | SkillProblem:
    """Read one ``SKILL.md`` into a :class:`Skill`, or explain why it cannot be used."""
    try:
        if skill_md.stat().st_size > _MAX_SKILL_BYTES:
            return SkillProblem(skill_md, f"SKILL.md is larger than {_MAX_SKILL_BYTES // 1024} KB")
        text = skill_md.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        return SkillProblem(skill_md, "SKILL.md is not UTF-8")
    except OSError as exc:
        return SkillProblem(skill_md, f"cannot read SKILL.md: {exc.strerror or exc}")
    split = _split_front_matter(text)
    if split is None:
        return SkillProblem(skill_md, "SKILL.md has no front matter: it must start with '---', YAML, '---'")
    import yaml  # type: ignore[import-untyped]  # ~15 ms: only a project with skills reads YAML

    try:
        meta = yaml.safe_load(split[0])
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1 for '---', +1 1-based
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return SkillProblem(skill_md, f"front matter is not valid YAML{where}: {what}")
    if not isinstance(meta, dict):
        return SkillProblem(skill_md, "front matter must be a YAML mapping with name and description")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        return SkillProblem(skill_md, "front matter lacks 'name' (a non-empty string)")
    if not isinstance(description, str) or not description.strip():
        return SkillProblem(skill_md, "front matter lacks 'description' (a non-empty string)")
    tools = _allowed_tools(meta.get("allowed-tools"))
    if isinstance(tools, str):
        return SkillProblem(skill_md, tools)
    return Skill(
        id=skill_md.parent.name,
        name=name.strip(),
        description=" ".join(description.split()),
        allowed_tools=tools,
        path=skill_md,
    )


def _roots(project_root: Path, config: ShipConfig, scan: SkillScan) -> list[Path]:
    """The skill roots to search, refusing ones outside the project (links too) unless allowed."""
    base = project_root.resolve()
    roots = []
    for rel in DEFAULT_SKILL_ROOTS:
        root = project_root / rel
        if not config.skills.allow_external_paths and not root.resolve().is_relative_to(base):
            scan.problems.append(
                SkillProblem(
                    root,
                    f"{rel}/ links outside the project; skipped (set skills.allowExternalPaths to true "
                    "to use it)",
                )
            )
            continue
        roots.append(root)
    for index, raw in enumerate(config.skills.paths):
        candidate = Path(raw).expanduser()
        candidate = candidate if candidate.is_absolute() else project_root / candidate
        inside = candidate.resolve().is_relative_to(base)
        if not inside and not config.skills.allow_external_paths:
            scan.problems.append(
                SkillProblem(
                    candidate,
                    f"skills.paths[{index}] ({raw}) is outside the project; "
                    "set skills.allowExternalPaths to true to use it",
                )
            )
            continue
        if not candidate.is_dir():
            scan.problems.append(SkillProblem(candidate, f"skills.paths[{index}] ({raw}) is not a directory"))
            continue
        roots.append(candidate)
    return roots


def _skill_dirs(root: Path) -> Iterable[Path]:
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [p for p in entries if not p.name.startswith(".") and p.is_dir()]


def scan_skills(project_root: Path, config: ShipConfig) -> SkillScan:
    """Find every skill under the project's roots, and every problem with them.

    Roots are ``skills/``, ``.claude/skills/`` and ship.json ``skills.paths`` in that order; each
    root's immediate, non-hidden subdirectories holding a ``SKILL.md`` are skills. When two roots
    hold the same id the first wins and the other is reported. A root or a skill directory that is
    a symlink leaving the project is refused unless ``skills.allowExternalPaths``; a ``SKILL.md``
    that is a symlink leaving its home (the project, or the allowed external directory) always is.
    """
    scan = SkillScan()
    base = project_root.resolve()
    seen: dict[str, Skill] = {}
    for root in _roots(project_root, config, scan):
        root_home = base if root.resolve().is_relative_to(base) else root.resolve()  # external: allowed
        for directory in _skill_dirs(root):
            skill_md = directory / "SKILL.md"
            if not skill_md.is_file():
                continue
            home = directory.resolve()
            if home.is_relative_to(root_home):
                home = root_home
            elif not config.skills.allow_external_paths:
                scan.problems.append(
                    SkillProblem(directory, "skill directory links outside the project; skipped")
                )
                continue
            inside = "the project" if home == base else "its skill directory"
            try:
                resolve_inside(home, skill_md, "SKILL.md", inside=inside)
            except OutsideProjectError as exc:
                scan.problems.append(SkillProblem(skill_md, str(exc)))
                continue
            parsed = parse_skill_file(skill_md)
            if isinstance(parsed, SkillProblem):
                scan.problems.append(parsed)
                continue
            parsed = dataclasses.replace(parsed, home=home)
            if parsed.id in seen:
                scan.problems.append(
                    SkillProblem(skill_md, f"duplicate skill id '{parsed.id}': {seen[parsed.id].path} wins")
                )
                continue
            if not _NAME_RE.fullmatch(parsed.name) or len(parsed.name) > 64:
                scan.problems.append(
                    SkillProblem(
                        skill_md,
                        f"name '{parsed.name}' is not 1-64 lowercase letters, digits and single hyphens "
                        "(the Agent Skills format)",
                        skipped=False,
                    )
                )
            if len(parsed.description) > _MAX_DESCRIPTION:
                scan.problems.append(
                    SkillProblem(
                        skill_md,
                        f"description is {len(parsed.description)} characters; the Agent Skills format "
                        f"allows {_MAX_DESCRIPTION} (the overview shows the first {_OVERVIEW_DESCRIPTION})",
                        skipped=False,
                    )
                )
            if parsed.name != parsed.id:
                scan.problems.append(
                    SkillProblem(
                        skill_md,
                        f"name '{parsed.name}' differs from its directory '{parsed.id}' "
                        "(the Agent Skills format wants them equal)",
                        skipped=False,
                    )
                )
            seen[parsed.id] = parsed
    scan.skills = sorted(seen.values(), key=lambda s: s.id)
    return scan


def discover_skills(project_root: Path, config: ShipConfig) -> list[Skill]:
    """The usable skills of a project, sorted by id (problems are dropped; see :func:`scan_skills`)."""
    return scan_skills(project_root, config).skills


def find_skill(skills: Iterable[Skill], query: str) -> Skill | list[Skill] | None:
    """Resolve what the model typed to one skill: id, then exact name, then case-insensitive substring.

    Returns:
        the skill; a list of candidates when the substring match is ambiguous; ``None`` when nothing
        matches.
    """
    items = list(skills)
    wanted = query.strip()
    for match in (
        lambda s: s.id == wanted,
        lambda s: s.name == wanted,
        lambda s: wanted.casefold() in (s.id.casefold(), s.name.casefold()),
    ):
        found = [s for s in items if match(s)]
        if found:
            return found[0]
    needle = wanted.casefold()
    found = [s for s in items if needle and (needle in s.id.casefold() or needle in s.name.casefold())]
    if len(found) == 1:
        return found[0]
    return found or None


def render_skills_overview(skills: Iterable[Skill], limit: int = 40) -> str:
    """The instructions section listing skills, or ``""`` when there are none.

    Only ``name — description`` per skill goes into every run; the body is loaded on demand, which
    is the whole point of skills.
    """
    items = list(skills)
    if not items:
        return ""
    lines = [
        "## Skills",
        "Skills are task-specific instructions kept on disk. When a request matches a skill below, "
        "call `skills_load` with its id before acting, then follow it; `skills_list` lists them all.",
        "",
    ]
    for skill in items[:limit]:
        label = skill.name if skill.name == skill.id else f"{skill.name} (id: {skill.id})"
        description = skill.description
        if len(description) > _OVERVIEW_DESCRIPTION:
            description = description[: _OVERVIEW_DESCRIPTION - 1].rstrip() + "…"
        lines.append(f"- {label} — {description}")
    if len(items) > limit:
        lines.append(f"- … and {len(items) - limit} more: call `skills_list` to see them")
    return "\n".join(lines)


def skills_report(project_root: Path, config: ShipConfig) -> tuple[list[str], bool]:
    """Lines for ``shipagent check`` about the project's skills, and whether any skill was skipped.

    Pure text (no console) so it can be printed by the CLI, logged, or asserted on in tests.
    """
    scan = scan_skills(project_root, config)

    def shown(path: Path) -> str:
        try:
            return path.relative_to(project_root).as_posix()
        except ValueError:
            return str(path)

    lines = [
        f"skills: {len(scan.skills)} usable"
        + (f" ({', '.join(s.id for s in scan.skills)})" if scan.skills else "")
    ]
    for problem in scan.problems:
        kind = "skipped" if problem.skipped else "warning"
        lines.append(f"skill {kind}: {shown(problem.path)}: {problem.message}")
    return lines, any(p.skipped for p in scan.problems)


class _Printer(Protocol):
    def print(self, *objects: Any) -> None: ...


def skills_check_hook(project_root: Path, config: ShipConfig, console: _Printer) -> None:
    """A ``shipagent check`` hook (``cli.check_hooks``): prints :func:`skills_report`."""
    from rich.markup import escape  # skill files are user text: "[/x]" must print, not style

    lines, _ = skills_report(project_root, config)
    for line in lines:
        console.print(escape(line))
