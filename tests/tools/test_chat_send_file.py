"""chat_send_file, driven through ShipAgent.run with a scripted model and a channel that takes files.

What may leave the project is the point of these tests: every way out (``..``, an absolute path, a
symlink, a link into ``.ship/``) and every secret the shell sandbox hides is refused, and the
refusal names what was wrong, as data the model reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shipagent.chatkeys import ShipPaths
from shipagent.jsonl import read_all
from shipagent.tools.execution import FileReplyChannel, OutgoingFile, ReplyChannel
from tests.support.tools import Call, Script, make_agent, make_project, tool_results

pytestmark = pytest.mark.anyio
KEY = "telegram:chat:42"


class FileChannel:
    """A channel that takes files: records what it was given."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.files: list[tuple[str, OutgoingFile]] = []

    async def send_text(self, chat_key: str, text: str) -> None:
        self.texts.append((chat_key, text))

    async def send_file(self, chat_key: str, file: OutgoingFile) -> None:
        self.files.append((chat_key, file))


class TextOnly:
    """A channel without files (a terminal)."""

    def send_text(self, chat_key: str, text: str) -> None:
        pass


async def send(root: Path, args: dict[str, Any], channel: ReplyChannel | None) -> dict[str, Any]:
    """Run one turn in which the model calls chat_send_file with ``args``; the tool's result."""
    script = Script([Call("chat_send_file", args), "ok"])
    result = await make_agent(root, script).run(KEY, "send it", channel=channel)
    assert result.success
    returned = tool_results(script.requests[-1], "chat_send_file")  # earlier turns' results come first
    return returned[-1]  # type: ignore[no-any-return]


def test_the_protocols_tell_the_channels_apart() -> None:
    assert isinstance(FileChannel(), FileReplyChannel)
    assert not isinstance(TextOnly(), FileReplyChannel)
    assert isinstance(TextOnly(), ReplyChannel)


async def test_a_file_is_sent_with_its_bytes_and_caption_and_recorded(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "reports").mkdir()
    content = bytes(range(256)) * 10
    (root / "reports" / "q3.bin").write_bytes(content)
    channel = FileChannel()
    script = Script([Call("chat_send_file", {"path": "reports/q3.bin", "caption": "The Q3 data"}), "Sent."])
    result = await make_agent(root, script).run(KEY, "send the report", channel=channel)

    assert result.success and not result.had_tool_failure
    assert channel.files == [(KEY, OutgoingFile("q3.bin", content, "The Q3 data", "reports/q3.bin"))]
    assert tool_results(script.requests[1], "chat_send_file") == [
        {"success": True, "sent": "reports/q3.bin", "bytes": 2560}
    ]
    entries = [(e["role"], e["text"], e.get("via")) for e in read_all(ShipPaths(root).transcript(KEY))]
    assert entries == [
        ("user", "send the report", None),
        ("assistant", "📎 reports/q3.bin (2.5 KB)\nThe Q3 data", "tool"),
        ("assistant", "Sent.", None),
    ]


async def test_an_absolute_path_inside_and_a_link_that_stays_inside_are_sent(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "out.txt").write_text("hello\n")
    (root / "latest.txt").symlink_to("out.txt")
    channel = FileChannel()
    assert (await send(root, {"path": str(root / "out.txt")}, channel))["success"] is True
    assert (await send(root, {"path": "latest.txt"}, channel))["sent"] == "out.txt"
    assert [f.data for _, f in channel.files] == [b"hello\n", b"hello\n"]
    assert [f.caption for _, f in channel.files] == [None, None]


def _outside_file(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    return secret


async def test_a_path_out_of_the_project_by_dot_dot_is_refused(tmp_path: Path) -> None:
    _outside_file(tmp_path)
    root = make_project(tmp_path / "p")
    channel = FileChannel()
    result = await send(root, {"path": "../secret.txt"}, channel)
    assert result["success"] is False
    assert result["error"].startswith("'../secret.txt' is outside the project")
    assert channel.files == []


async def test_an_absolute_path_outside_the_project_is_refused(tmp_path: Path) -> None:
    secret = _outside_file(tmp_path)
    root = make_project(tmp_path / "p")
    channel = FileChannel()
    for path in (str(secret), "/etc/hostname", "~/.bashrc"):
        result = await send(root, {"path": path}, channel)
        assert result["success"] is False
        assert result["error"].startswith(f"'{path}' is outside the project")
    assert channel.files == []


async def test_a_symlink_leading_out_of_the_project_is_refused(tmp_path: Path) -> None:
    secret = _outside_file(tmp_path)
    root = make_project(tmp_path / "p")
    (root / "notes.txt").symlink_to(secret)
    (root / "docs").symlink_to(tmp_path)  # a directory link: docs/secret.txt is the same file
    channel = FileChannel()
    for path in ("notes.txt", "docs/secret.txt"):
        result = await send(root, {"path": path}, channel)
        assert result["success"] is False
        assert f"'{path}' leads outside the project through a symlink" in result["error"]
    assert channel.files == []


async def test_files_under_ship_and_links_into_it_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    other = ShipPaths(root).transcript("telegram:chat:99")
    other.parent.mkdir(parents=True)
    other.write_text('{"role": "user", "text": "another chat"}\n')
    (root / "history.jsonl").symlink_to(other)
    channel = FileChannel()
    direct = await send(root, {"path": str(other.relative_to(root))}, channel)
    assert direct["success"] is False and "is under .ship/" in direct["error"]
    linked = await send(root, {"path": "history.jsonl"}, channel)
    assert linked["success"] is False and "leads into .ship/" in linked["error"]
    assert channel.files == []


async def test_secrets_the_shell_sandbox_hides_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"permissions": {"execShell": {"hide": ["private"]}}})
    (root / ".env").write_text("TELEGRAM_BOT_TOKEN=1:abc\n")
    (root / ".env.production").write_text("KEY=1\n")
    (root / "private").mkdir()
    (root / "private" / "keys.pem").write_text("-----BEGIN-----\n")
    (root / "token.txt").symlink_to(".env")
    channel = FileChannel()
    for path in (".env", ".env.production", "private/keys.pem", "token.txt"):
        result = await send(root, {"path": path}, channel)
        assert result["success"] is False, path
        assert "hidden from the agent's commands" in result["error"]
    assert channel.files == []


async def test_a_missing_file_a_directory_a_fifo_and_an_empty_file_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "build").mkdir()
    os.mkfifo(root / "pipe")
    channel = FileChannel()
    missing = await send(root, {"path": "reports/none.pdf"}, channel)
    assert missing["success"] is False and missing["error"].startswith("'reports/none.pdf' does not exist")
    directory = await send(root, {"path": "build"}, channel)
    assert directory["success"] is False and directory["error"].startswith("'build' is a directory")
    fifo = await send(root, {"path": "pipe"}, channel)  # opening it would block forever
    assert fifo == {"success": False, "error": "'pipe' is not a regular file"}
    (root / "empty.txt").write_bytes(b"")
    empty = await send(root, {"path": "empty.txt"}, channel)  # Telegram refuses an empty upload
    assert empty == {"success": False, "error": "'empty.txt' is empty; there is nothing to send"}
    assert channel.files == []


async def test_a_file_over_the_cap_is_refused_naming_the_setting(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"tools": {"chatSendFile": {"maxBytes": 100}}})
    (root / "big.bin").write_bytes(b"x" * 101)
    (root / "fits.bin").write_bytes(b"x" * 100)
    channel = FileChannel()
    result = await send(root, {"path": "big.bin"}, channel)
    assert result == {
        "success": False,
        "error": "'big.bin' is 101 bytes, over the limit of 100 (ship.json tools.chatSendFile.maxBytes)",
    }
    assert (await send(root, {"path": "fits.bin"}, channel))["success"] is True
    assert [f.name for _, f in channel.files] == ["fits.bin"]


async def test_without_a_channel_that_takes_files_the_chat_cannot_receive_files(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "out.txt").write_text("hello\n")
    none = await send(root, {"path": "out.txt"}, None)
    assert none["success"] is False
    assert none["error"].startswith("this chat cannot receive files (it has no channel)")
    text_only = await send(root, {"path": "out.txt"}, TextOnly())
    assert text_only["success"] is False
    assert text_only["error"].startswith("this chat cannot receive files (it is on a channel without files)")
    entries = read_all(ShipPaths(root).transcript(KEY))
    assert not [e for e in entries if e.get("via") == "tool"]  # nothing was sent, nothing recorded


async def test_a_broken_channel_is_reported_as_data_and_not_recorded(tmp_path: Path) -> None:
    class Broken(FileChannel):
        async def send_file(self, chat_key: str, file: OutgoingFile) -> None:
            raise ConnectionError("telegram is down")

    root = make_project(tmp_path / "p")
    (root / "out.txt").write_text("hello\n")
    result = await send(root, {"path": "out.txt"}, Broken())
    assert result["success"] is False
    assert result["error"] == "the channel could not deliver the file: ConnectionError: telegram is down"
    entries = read_all(ShipPaths(root).transcript(KEY))
    assert not [e for e in entries if e.get("via") == "tool"]


async def test_the_tool_schema_caps_the_caption(tmp_path: Path) -> None:
    from shipagent.tools import builtin_toolset

    schema = builtin_toolset().tools["chat_send_file"].function_schema.json_schema
    assert schema["required"] == ["path"]
    assert schema["properties"]["caption"]["anyOf"][0]["maxLength"] == 1024
