"""Starting what an agent holds, and stopping it again whatever fails.

``async with agent`` starts, in order: the project lock, the MCP servers, the context providers,
the embedded model (ship.json ``llm.provider: "local"``) and the durable executor. The returned
stack stops them in reverse (durable workers drain first: their turns use the servers), each stop
running even when one before it failed, so no server process or session token outlives the
agent; a start that fails stops what had started.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Protocol

import anyio
from pydantic_ai.models import Model

from .._lock import ProjectLock
from ..config import ShipConfig
from ..errors import ConfigError
from ..store._protocols import ChatStore
from ..tools import warn_if_unsandboxed
from ..tools.context import ProviderRuntime
from ..tools.handover._runtime import Handover
from ..tools.mcp import McpManager
from ._executors import TurnExecutor, executor_factories

__all__ = ["Startable", "start_services"]


class Startable(Protocol):
    """The agent as starting it reads it (the handover and the model are read when needed: a
    delegation replaces the handover after the agent is built; the model is built lazily)."""

    turn_executor: TurnExecutor | None

    @property
    def config(self) -> ShipConfig: ...
    @property
    def project_root(self) -> Path: ...
    @property
    def project_lock(self) -> ProjectLock: ...
    @property
    def store(self) -> ChatStore: ...
    @property
    def mcp(self) -> McpManager: ...
    @property
    def context_runtime(self) -> ProviderRuntime: ...
    @property
    def handover(self) -> Handover: ...
    @property
    def model(self) -> Model: ...


async def start_services(agent: Startable) -> AsyncExitStack:
    """Start everything in order; the stack's ``aclose`` stops it all in reverse."""
    config = agent.config
    stack = AsyncExitStack()
    try:
        await agent.project_lock.aacquire()  # ProjectLockedError if another process has the project
        stack.push_async_callback(agent.project_lock.arelease)
        stack.push_async_callback(agent.store.close)  # a cluster's database connections
        # exec_shell without its sandbox is said once, at start (a log warning, or an error when required)
        await anyio.to_thread.run_sync(warn_if_unsandboxed, config.permissions.exec_shell, agent.project_root)
        mcp, providers = agent.mcp, agent.context_runtime
        await mcp.start()  # in parallel; raises only for a tool-name collision
        stack.push_async_callback(mcp.stop)  # shielded
        await providers.start()
        stack.push_async_callback(providers.stop)  # provider MCP servers; revokes session tokens
        stack.push_async_callback(lambda: agent.handover.aclose())
        if (config.llm.provider or "").lower() == "local":  # the embedded model's server
            from ._local_model import local_model_of

            local = local_model_of(agent.model)  # None when a model= override replaced it
            if local is not None:
                await local.start()
                stack.push_async_callback(local.stop)
        await _start_executor(agent, stack)
    except BaseException:
        await stack.aclose()
        raise
    return stack


async def _start_executor(agent: Startable, stack: AsyncExitStack) -> None:
    """Durable seam: ship.json ``durable.enabled`` hands turns to the registered executor."""
    if not agent.config.durable.enabled or agent.turn_executor is not None:
        return
    factory = executor_factories.get("durable")
    if factory is None:  # pragma: no cover - registered by the package facade
        raise ConfigError("durable.enabled: the durable room is not available", path="durable.enabled")
    agent.turn_executor = await stack.enter_async_context(factory(agent))
    stack.callback(setattr, agent, "turn_executor", None)  # before the executor stops: no new turns
