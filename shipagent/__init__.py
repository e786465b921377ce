"""shipagent: a runtime for chat agents on pydantic-ai whose context stays bounded and inspectable.

The public names load on first use (PEP 562 module ``__getattr__``): ``import shipagent`` and
the ``shipagent`` command's start-up do not pay for pydantic-ai until something needs an agent.
pydantic-ai's first-run banner is turned off by ``shipagent.agent._agent`` (every run goes through
:class:`ShipAgent`), not here, so that importing the package stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._moved import install as _install_moved
from .agent._executors import executor_factories as _executor_factories
from .errors import ConfigError

if TYPE_CHECKING:
    from .agent._agent import ShipAgent
    from .config import ShipConfig, load_config
    from .errors import (
        BadRequestError,
        ChatKeyError,
        NotFoundError,
        ProjectLockedError,
        ShipAgentError,
        ToolContextError,
    )
    from .events import ApprovalRequired, Compacted, Done, TextDelta, ToolFinished, ToolStarted
    from .hosts.cli._checks import Problem, check_project
    from .results import AgentResult, Sender, StepEvent, ToolCallRecord
    from .store.pins import Pin
    from .tools._deps import TurnDeps
    from .tools.execution import (
        ApprovalRequest,
        InjectionResult,
        ReplyChannel,
        ToolExecutionContext,
        current_tool_context,
    )


def _durable_executor(agent: ShipAgent) -> object:
    """ship.json ``durable.enabled``: the DBOS-backed executor (imported here, on first use)."""
    try:
        from .hosts.durable._runtime import DurableExecutor
    except ImportError as exc:
        raise ConfigError(
            f"durable.enabled needs the durable extra: pip install -e '.[durable]' in the shipagent checkout ({exc})",
            path="durable.enabled",
        ) from None
    return DurableExecutor(agent, **agent.turn_executor_options)


_executor_factories.setdefault("durable", _durable_executor)  # type: ignore[arg-type]
_install_moved()

_HOME = {
    "AgentResult": "results",
    "ApprovalRequest": "tools.execution",
    "ApprovalRequired": "events",
    "BadRequestError": "errors",
    "ChatKeyError": "errors",
    "Compacted": "events",
    "ConfigError": "errors",
    "Done": "events",
    "InjectionResult": "tools.execution",
    "NotFoundError": "errors",
    "Pin": "store.pins",
    "Problem": "hosts.cli._checks",
    "ProjectLockedError": "errors",
    "ReplyChannel": "tools.execution",
    "ShipAgent": "agent",
    "ShipAgentError": "errors",
    "ShipConfig": "config",
    "Sender": "results",
    "StepEvent": "results",
    "TextDelta": "events",
    "ToolCallRecord": "results",
    "ToolContextError": "errors",
    "ToolExecutionContext": "tools.execution",
    "ToolFinished": "events",
    "ToolStarted": "events",
    "TurnDeps": "tools._deps",
    "check_project": "hosts.cli._checks",
    "current_tool_context": "tools.execution",
    "load_config": "config",
}
"""Where each public name lives (``shipagent.<module>``)."""

__all__ = [
    "AgentResult",
    "ApprovalRequest",
    "ApprovalRequired",
    "BadRequestError",
    "ChatKeyError",
    "Compacted",
    "ConfigError",
    "Done",
    "InjectionResult",
    "NotFoundError",
    "Pin",
    "Problem",
    "ProjectLockedError",
    "ReplyChannel",
    "Sender",
    "ShipAgent",
    "ShipAgentError",
    "ShipConfig",
    "StepEvent",
    "TextDelta",
    "ToolCallRecord",
    "ToolContextError",
    "ToolExecutionContext",
    "ToolFinished",
    "ToolStarted",
    "TurnDeps",
    "check_project",
    "current_tool_context",
    "load_config",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:  # ``shipagent.window`` and friends, as when this file imported them eagerly
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'shipagent' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
