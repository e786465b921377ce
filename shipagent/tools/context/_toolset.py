"""Provider tools as a pydantic-ai toolset.

A :class:`~shipagent.tools.context.ProviderTool` is defined by a JSON schema, not by a Python signature,
so it becomes a ``Tool.from_schema``. pydantic-ai skips schema validation for such tools; we
validate in the tool's ``args_validator`` with :mod:`jsonschema`, which puts bad arguments back to
the model as a retry (exactly what happens with a typed tool) and means the handler only ever sees
arguments that match its schema. A handler that raises becomes ``{"success": false, "error"}``,
the failure shape of every shipagent tool: one broken provider tool never kills the run. (A handler
may raise ``ModelRetry`` or ``ToolFailed`` itself to get pydantic-ai's own behaviour.)
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import Sequence
from typing import Any

import anyio.to_thread
from pydantic_ai import FunctionToolset, ModelRetry, RunContext, Tool
from pydantic_ai.exceptions import ToolFailed

from ._types import ProviderTool

__all__ = ["provider_toolset"]

log = logging.getLogger(__name__)


def _validator_for(tool: ProviderTool) -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # only with provider tools

    validator = Draft202012Validator(tool.parameters)

    def validate(ctx: RunContext[Any], **args: Any) -> None:
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        if errors:
            problems = "; ".join(
                f"{'.'.join(map(str, e.absolute_path)) or '(arguments)'}: {e.message}" for e in errors[:5]
            )
            raise ModelRetry(f"invalid arguments for {tool.name}: {problems}")

    return validate


def _runner_for(tool: ProviderTool) -> Any:
    handler = tool.handler

    async def run(**args: Any) -> Any:
        try:
            if inspect.iscoroutinefunction(handler):
                return await handler(**args)
            # a sync handler may block: run it in a thread that still sees the run's context vars
            call = functools.partial(contextvars.copy_context().run, handler, **args)
            result = await anyio.to_thread.run_sync(call)
            return await result if inspect.isawaitable(result) else result
        except (ModelRetry, ToolFailed):
            raise
        except Exception as exc:
            log.warning("provider tool %s failed", tool.name, exc_info=True)
            # the shape every shipagent tool reports a failure in (see shipagent.agent._guard)
            return {"success": False, "error": f"{tool.name} failed: {type(exc).__name__}: {exc}"}

    return run


def provider_toolset(tools: Sequence[ProviderTool], *, id: str = "context-providers") -> FunctionToolset[Any]:
    """A pydantic-ai toolset calling each tool's handler with schema-validated arguments.

    Handlers run inside the agent run, so ``current_tool_context()`` (chat key, session token,
    injection) works in them exactly as in builtin tools.
    """
    return FunctionToolset(
        [
            Tool.from_schema(
                _runner_for(tool),
                name=tool.name,
                description=tool.description,
                json_schema=tool.parameters,
                args_validator=_validator_for(tool),
            )
            for tool in tools
        ],
        id=id,
    )
