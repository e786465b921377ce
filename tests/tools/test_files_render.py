"""Compacted messages become a readable, greppable history file; spill previews show head and tail."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from shipagent.chatkeys import ShipPaths
from shipagent.store.files._render import render_messages, render_preview
from shipagent.tools.files import ContextFiles, ContextRef

T0 = datetime(2026, 11, 22, 2, 30, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 22, 2, 30, 5, tzinfo=UTC)

MESSAGES = [
    ModelRequest(
        parts=[SystemPromptPart("be brief", timestamp=T0), UserPromptPart("部署失败了吗？🚀", timestamp=T0)]
    ),
    ModelResponse(
        parts=[
            TextPart("让我看看"),
            ToolCallPart("exec_shell", {"command": "tail -n 5 deploy.log"}, "call_1"),
        ],
        timestamp=T1,
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("exec_shell", {"exit_code": 1, "stdout": "E42 disk full"}, "call_1", timestamp=T1)
        ]
    ),
    ModelResponse(parts=[TextPart("磁盘满了 (E42)。")], timestamp=T1),
]


def test_history_rendering_keeps_roles_times_text_and_tool_calls_with_results() -> None:
    text, first, last = render_messages(MESSAGES)
    assert (first, last) == ("2026-11-22 02:30:00 UTC", "2026-11-22 02:30:05 UTC")
    assert text == (
        "# Conversation history (4 messages)\n\n"
        "## system · 2026-11-22 02:30:00 UTC\nbe brief\n\n"
        "## user · 2026-11-22 02:30:00 UTC\n部署失败了吗？🚀\n\n"
        "## assistant · 2026-11-22 02:30:05 UTC\n让我看看\n"
        '→ call `exec_shell` (call_1): {"command":"tail -n 5 deploy.log"}\n\n'
        "## tool · 2026-11-22 02:30:05 UTC\n"
        '← result of `exec_shell` (call_1):\n{"exit_code":1,"stdout":"E42 disk full"}\n\n'
        "## assistant · 2026-11-22 02:30:05 UTC\n磁盘满了 (E42)。\n"
    )


def test_add_history_messages_writes_a_history_ref_that_grep_finds(tmp_path: Path) -> None:
    files = ContextFiles(ShipPaths(tmp_path))
    ref = files.add_history_messages("api:chat:alice", MESSAGES)
    assert (ref.kind, ref.source, ref.mime) == ("history", "compaction", "text/markdown")
    assert ref.name == "conversation 2026-11-22 02:30:00 UTC – 2026-11-22 02:30:05 UTC"
    assert ref.description.startswith("4 compacted messages")
    found = files.grep("api:chat:alice", ref.id, "disk full", context_lines=1)
    assert [(m.line, m.content) for m in found.matches] == [(15, '{"exit_code":1,"stdout":"E42 disk full"}')]
    assert found.matches[0].before == ["← result of `exec_shell` (call_1):"]


def test_preview_shows_head_and_tail_on_character_boundaries_within_about_2kb() -> None:
    text = "开始\n" + "数据🎉" * 5000 + "\n结束 END"
    ref = ContextRef(
        "a1b2c3d", "artifact", "x", "", len(text.encode()), "t", "text/plain", True, "tool:x", "a1b2c3d.txt"
    )
    preview = render_preview(text, ref, what="x output")
    first_line, body = preview.split("\n", 1)
    assert first_line == (
        f"[x output too large for the context window: {len(text.encode()):,} bytes, 3 lines, kept as "
        "context file id='a1b2c3d'; showing the first 1,023 and last 1,021 bytes]"
    )
    assert body.startswith("开始\n数据🎉")
    assert "结束 END\n[use context_read(id='a1b2c3d', offset=…), context_tail(id='a1b2c3d')" in body
    assert "\ufffd" not in preview  # no character was cut in half
    assert len(preview.encode()) < 2048 + 400
