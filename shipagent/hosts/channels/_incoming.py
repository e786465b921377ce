"""Files that arrive with a message: downloaded into the chat's context files, named to the model.

The model cannot see a platform's file; it can read a context file. So each attachment within
the size limit is downloaded and kept as an ``artifact`` of the chat (``.ship/chats/<key>/context``),
and the turn's text says what arrived and how to read it (``context_read`` with its id). A file
over the limit is refused with a reply, and the model is told it was refused.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from ._delivery import retrying
from ._types import Attachment, InboundMessage, Outbound, PermanentSendError, TransientSendError

if TYPE_CHECKING:
    from ...agent._agent import ShipAgent
    from ._writer import ReplyWriter

__all__ = ["receive_file"]


async def receive_file(
    agent: ShipAgent,
    outbound: Outbound,
    channel: str,
    message: InboundMessage,
    item: Attachment,
    writer: ReplyWriter,
    limit: int,
) -> str:
    """Download ``item`` into the chat's context files; the line that tells the model about it."""
    label = f"{item.kind} {item.name}" if item.name else item.kind
    if item.size is not None and item.size > limit:
        await writer.send_separate(f"I can't take {label}: {item.size} bytes is over the {limit}-byte limit.")
        return f"[{label} was refused: {item.size} bytes is over the limit]"
    folder = agent.paths.ship_dir / "channels" / "incoming"
    await anyio.to_thread.run_sync(partial(folder.mkdir, parents=True, exist_ok=True))
    target = folder / f"{channel}-{message.chat_id}-{message.message_id}-{item.file_id[:32]}"
    keep = partial(
        agent.context_files.add_artifact_file,
        message.chat_key,
        target,
        name=item.name or f"{item.kind}-{message.message_id}",
        source=f"{channel} attachment",
        description=f"{label} sent by {message.sender_name}",
        mime=item.mime_type or "application/octet-stream",
        move=True,
    )
    try:
        await retrying(partial(outbound.download, item, target))
        ref = await anyio.to_thread.run_sync(keep)
    except (TransientSendError, PermanentSendError, OSError) as exc:
        return f"[{label} could not be downloaded: {exc}]"
    return (
        f"[{message.sender_name} attached {label} ({ref.size_bytes} bytes): "
        f'context file {ref.id}, read it with context_read(id="{ref.id}")]'
    )
