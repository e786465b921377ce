"""A link that stays inside the project but leads into ``.ship/`` is refused like a link out.

``.ship/`` holds every chat's transcript: ``Agent.md`` linked to another chat's
``history.jsonl`` would put that chat in front of every user of the agent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipagent.chatkeys import ShipPaths
from tests.support.tools import Script, make_agent, make_project

pytestmark = pytest.mark.anyio

SECRET = "bob-said-this-in-private-9931"


def _bob(root: Path) -> Path:
    transcript = ShipPaths(root).transcript("api:chat:bob")
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"role": "user", "text": SECRET}) + "\n", encoding="utf-8")
    return transcript


async def test_agent_md_linked_into_another_chats_transcript_is_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    transcript = _bob(root)
    (root / "Agent.md").symlink_to(transcript.relative_to(root))
    script = Script(["hello"])
    result = await make_agent(root, script).run("web:alice", "hi")

    assert not result.success
    assert "Agent.md" in result.output and ".ship/" in result.output
    assert SECRET not in result.output
    assert script.requests == []
