"""``chat_send_file``: a file of the project sent into the chat (a document, or a photo).

What may leave: a regular file inside the project, after every symlink is followed, that an
``exec_shell`` command could see too. Nothing under ``.ship/`` (every chat's transcripts, memory and
context files: another chat's history is not this chat's to receive), no ``.env``, ``.env.*`` or
``.envrc``, nothing ``permissions.execShell.hide`` names. The model is steered by whoever writes in
the chat, and in a group that is not necessarily the agent's owner, so the tool sends no file a
shell command of the same agent would not be allowed to read.

The file is read once, in a worker thread, after the checks and at most ``maxBytes + 1`` bytes of
it (a file that grows meanwhile is still refused), and the channel gets those bytes: what is sent
is what was checked. The tool is always offered, so the tool list stays the same in every chat;
in a chat whose channel takes no files (the terminal, the HTTP API) it answers that the chat
cannot receive files.
"""

from __future__ import annotations

import inspect
import os
import stat
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from pydantic import Field
from pydantic_ai import RunContext

from .._paths import OutsideProjectError, resolve_inside
from ..config import ExecShellPermission
from ._common import failure
from ._deps import TurnDeps, deps_of
from ._mounts import hidden_paths
from .execution import FileReplyChannel, OutgoingFile

__all__ = ["FileRefused", "chat_send_file", "read_for_sending"]

CAPTION_MAX_CHARS = 1024
"""Telegram's caption limit; a longer text belongs in a message (``chat_send``) of its own."""


class FileRefused(Exception):
    """The file cannot be sent; the message says why, for the model."""


def _outside(path: str) -> FileRefused:
    return FileRefused(
        f"'{path}' is outside the project; only files inside the project can be sent "
        "(name them relative to the project root)"
    )


def read_for_sending(
    root: Path, path: str, *, max_bytes: int, shell: ExecShellPermission | None = None
) -> OutgoingFile:
    """The file at ``path`` (relative to ``root`` or absolute inside it), checked and read.

    ``shell`` is ``permissions.execShell``: what its ``hide`` names is not sent. Blocking (``lstat``
    calls and the read): async callers use a worker thread.

    Raises:
        FileRefused: outside the project (by ``..``, an absolute path or a symlink), under
            ``.ship/``, a secret the shell sandbox hides, missing, not a regular file, empty, or
            larger than ``max_bytes``.
    """
    base = root.resolve()
    asked = Path(path).expanduser()
    named = Path(os.path.normpath(asked if asked.is_absolute() else base / asked))
    if not named.is_relative_to(base):
        raise _outside(path)
    try:
        target = resolve_inside(base, named, f"'{path}'")
    except OutsideProjectError as exc:
        raise FileRefused(str(exc)) from None
    if target.is_relative_to(base / ".ship") or target.is_relative_to((base / ".ship").resolve()):
        raise FileRefused(
            f"'{path}' is under .ship/ (the chats' transcripts, memory and context files); "
            "files there are not sent"
        )
    dirs, files = hidden_paths(shell or ExecShellPermission(), base)
    if target in files or any(target.is_relative_to(d) for d in dirs):
        raise FileRefused(
            f"'{path}' is hidden from the agent's commands (.env files and "
            "permissions.execShell.hide); it is not sent either"
        )
    shown = target.relative_to(base).as_posix()
    try:
        info = target.stat()
    except FileNotFoundError:
        raise FileRefused(f"'{path}' does not exist (looked for {shown} in the project)") from None
    except OSError as exc:
        raise FileRefused(f"'{path}' cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise FileRefused(f"'{path}' is a directory; send one file (pack a directory first)")
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(f"'{path}' is not a regular file")
    too_big = FileRefused(
        f"'{path}' is {info.st_size:,} bytes, over the limit of {max_bytes:,} "
        "(ship.json tools.chatSendFile.maxBytes)"
    )
    if info.st_size > max_bytes:
        raise too_big
    try:
        with target.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise FileRefused(f"'{path}' cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # it grew since the stat
        raise too_big
    if not data:
        raise FileRefused(f"'{path}' is empty; there is nothing to send")
    return OutgoingFile(name=target.name, data=data, path=shown)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


async def chat_send_file(
    run: RunContext[TurnDeps],
    path: Annotated[str, Field(min_length=1, max_length=4096)],
    caption: Annotated[str | None, Field(max_length=CAPTION_MAX_CHARS)] = None,
) -> dict[str, Any]:
    """Send a file of the project to the user in this chat (a photo for images, else a document).

    Only in chats that can receive files (Telegram, Slack, Discord, Feishu, QQ); only files inside the project. Send the file
    the user asked for or that you made for them, then answer as usual.

    Args:
        path: the file, relative to the project root (`reports/q3.pdf`).
        caption: a short text shown with the file (at most 1,024 characters).
    """
    ctx = deps_of(run).tool
    channel = ctx.channel
    if not isinstance(channel, FileReplyChannel):
        where = "has no channel" if channel is None else "is on a channel without files"
        return failure(
            f"this chat cannot receive files (it {where}); tell the user where the file is instead"
        )
    settings = ctx.config.tools.chat_send_file
    shell = ctx.config.permissions.exec_shell
    try:
        file = await anyio.to_thread.run_sync(
            lambda: read_for_sending(ctx.project_root, path, max_bytes=settings.max_bytes, shell=shell)
        )
    except FileRefused as exc:
        return failure(str(exc))
    text = caption.strip() if caption else ""
    if text:
        file = OutgoingFile(file.name, file.data, text, file.path)
    try:
        sent = channel.send_file(ctx.chat_key, file)
        if inspect.isawaitable(sent):
            await sent
    except Exception as exc:  # a broken channel is the model's problem to report, not a crash
        return failure(f"the channel could not deliver the file: {type(exc).__name__}: {exc}")
    # The transcript gets what the user saw: the file (by its place in the project) and its caption.
    line = f"📎 {file.path} ({_size(len(file.data))})"
    ctx.sent_texts.append(f"{line}\n{text}" if text else line)
    return {"success": True, "sent": file.path, "bytes": len(file.data)}
