"""Nothing in the repository points a reader at what they cannot see.

The README, the documentation, and the code's comments, docstrings and messages are read by
people who have only this repository: a reference to an issue number, a work session, a seed or
specification file, a section of a design document or notes kept elsewhere is a dead end for
them. Say what the reference stood for instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT

SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".js", ".css", ".html", ".json", ".example", ".txt"}
TREES = ["shipagent", "tests", "bench", "examples", "docs", "skills", ".ci", ".github"]
TOP = ["README.md", "Agent.md", "mkdocs.yml", "pyproject.toml", "ship.json.example"]

ARTEFACTS = {
    "an issue number": re.compile(
        r"(?i)\bissues?\s*#?\d+\b|\(#\d{1,5}\)|\b(?:see|fixes|fixed|closes|closed|resolves|PR)\s+#\d{1,5}\b"
    ),
    "a work session": re.compile(r"(?i)\bsession\s+#?\d+\b|\bsessions?\s+of\s+(?:the\s+)?work\b"),
    "a seed or specification file": re.compile(
        r"(?i)\bseed\s+\d{2,3}\b|\bseed\s+files?\b|\bthe\s+seeds\b|\bspec(?:ification)?\s+files?\b"
    ),
    "a design-document section": re.compile(r"(?i)\bDESIGN(?:\.md)?\s*§|\bDESIGN\.md\b"),
    "notes outside the repository": re.compile(r"/work/(?:notes|shared|main|wt)\b|\bBRIEF\.md\b"),
}


def _files() -> list[Path]:
    found = [ROOT / name for name in TOP if (ROOT / name).is_file()]
    for tree in TREES:
        base = ROOT / tree
        if base.is_dir():
            found += [p for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in found if p != Path(__file__).resolve() and "__pycache__" not in p.parts]


def references(text: str) -> list[tuple[int, str, str]]:
    """``(line number, kind, line)`` for every development artefact named in ``text``."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in ARTEFACTS.items():
            if pattern.search(line):
                hits.append((number, kind, line.strip()))
    return hits


def test_no_document_or_comment_refers_to_development_artefacts() -> None:
    files = _files()
    assert len(files) > 100  # the scan sees the repository, not an empty directory
    found = [
        f"{path.relative_to(ROOT)}:{number}: {kind}: {line[:120]}"
        for path in files
        for number, kind, line in references(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []


def test_the_scan_recognises_each_kind_of_reference() -> None:
    examples = {
        "see issue 12 for the rest": "an issue number",
        "the race (#14) is fixed": "an issue number",
        "what session 4 measured": "a work session",
        "the sessions of the work so far": "a work session",
        "drives tool scope, seed 000": "a seed or specification file",
        "the five stores the seeds require": "a seed or specification file",
        "as DESIGN §3 says": "a design-document section",
        "see /work/notes/x.md": "notes outside the repository",
    }
    for text, kind in examples.items():
        assert [k for _, k, _ in references(text)] == [kind], text
    fine = [
        "a session token per chat",
        "the access log names a key only by its position (key #2)",
        "random.Random(seed)",
        "--bot: #222831;",
        "MODEL SUMMARY #1",
        "# 1. a Postgres every machine can reach",
    ]
    for text in fine:
        assert references(text) == [], text
