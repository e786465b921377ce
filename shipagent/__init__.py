"""shipagent: a runtime for chat agents on pydantic-ai whose context stays bounded and inspectable.

The public names load on first use (PEP 562 module ``__getattr__``): ``import shipagent`` and
the ``shipagent`` command's start-up do not pay for pydantic-ai until something needs an agent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import ShipAgent
    from .config import ShipConfig, load_config
    from .errors import (
        BadRequestError,
        ChatKeyError,
        ConfigError,
        NotFoundError,
        ShipAgentError,
        ToolContextError,
    )
    from .execution import (
        ApprovalRequest,
        InjectionResult,
        ToolExecutionContext,
        current_tool_context,
    )
    from .results import AgentResult, StepEvent, ToolCallRecord

_HOME = {
    "AgentResult": "results",
    "ApprovalRequest": "execution",
    "BadRequestError": "errors",
    "ChatKeyError": "errors",
    "ConfigError": "errors",
    "InjectionResult": "execution",
    "NotFoundError": "errors",
    "ShipAgent": "agent",
    "ShipAgentError": "errors",
    "ShipConfig": "config",
    "StepEvent": "results",
    "ToolCallRecord": "results",
    "ToolContextError": "errors",
    "ToolExecutionContext": "execution",
    "current_tool_context": "execution",
    "load_config": "config",
}
"""Where each public name lives (``shipagent.<module>``)."""

__all__ = [
    "AgentResult",
    "ApprovalRequest",
    "BadRequestError",
    "ChatKeyError",
    "ConfigError",
    "InjectionResult",
    "NotFoundError",
    "ShipAgent",
    "ShipAgentError",
    "ShipConfig",
    "StepEvent",
    "ToolCallRecord",
    "ToolContextError",
    "ToolExecutionContext",
    "current_tool_context",
    "load_config",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:  # ``shipagent.history`` and friends, as when this file imported them eagerly
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
