"""Starting what an agent holds, and stopping it again whatever fails.

``async with agent`` starts, in order: the project lock, the MCP servers, the context providers,
the embedded model (ship.json ``llm.provider: "local"``) and the durable executor. The returned
stack stops them in reverse (durable workers drain first: their turns use the servers), each stop
running even when one before it failed, so no server process or session token outlives the
agent; a start that fails stops what had started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from pydantic_ai.models import Model

from .._lock import ProjectLock
from ..config import ShipConfig
from ..store._protocols import ChatStore
from ..tools import warn_if_unsandboxed
from ..tools.context import ProviderRuntime
from ..tools.handover._runtime import Handover
from ..tools.mcp import McpManager

__all__ = ["start_services"]


async def start_services(
    *,
    config: ShipConfig,
    project_root: Path,
    lock: ProjectLock,
    store: ChatStore,
    mcp: McpManager,
    providers: ProviderRuntime,
    handover: Callable[[], Handover],
    model: Callable[[], Model],
    executor: Callable[[AsyncExitStack], Awaitable[None]],
) -> AsyncExitStack:
    """Start everything in order; the stack's ``aclose`` stops it all in reverse.

    ``handover`` and ``model`` are read when needed (a delegation replaces the handover after
    the agent is built; the model is built lazily), ``executor`` starts the durable executor on
    the stack when ship.json turns durable mode on.
    """
    stack = AsyncExitStack()
    try:
        await lock.aacquire()  # ProjectLockedError if another process has the project
        stack.push_async_callback(lock.arelease)
        stack.push_async_callback(store.close)  # a cluster's database connections
        # exec_shell without its sandbox is said once, at start (a log warning, or an error when required)
        await anyio.to_thread.run_sync(warn_if_unsandboxed, config.permissions.exec_shell, project_root)
        await mcp.start()  # in parallel; raises only for a tool-name collision
        stack.push_async_callback(mcp.stop)  # shielded
        await providers.start()
        stack.push_async_callback(providers.stop)  # provider MCP servers; revokes session tokens
        stack.push_async_callback(lambda: handover().aclose())
        if (config.llm.provider or "").lower() == "local":  # the embedded model's server
            from ._local_model import local_model_of

            local = local_model_of(model())  # None when a model= override replaced it
            if local is not None:
                await local.start()
                stack.push_async_callback(local.stop)
        await executor(stack)
    except BaseException:
        await stack.aclose()
        raise
    return stack
