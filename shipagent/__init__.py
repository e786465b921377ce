"""shipagent: a runtime for chat agents on pydantic-ai whose context stays bounded and inspectable."""

from . import _quiet  # noqa: F401  (first: pydantic-ai's banner off before any agent exists)
from ._checks import Problem, check_project
from .agent import ShipAgent
from .config import ShipConfig, load_config
from .errors import (
    BadRequestError,
    ChatKeyError,
    ConfigError,
    NotFoundError,
    ProjectLockedError,
    ShipAgentError,
    ToolContextError,
)
from .events import ApprovalRequired, Compacted, Done, TextDelta, ToolFinished, ToolStarted
from .execution import (
    ApprovalRequest,
    InjectionResult,
    ToolExecutionContext,
    current_tool_context,
)
from .results import AgentResult, StepEvent, ToolCallRecord
from .turns import executor_factories as _executor_factories


def _durable_executor(agent: ShipAgent) -> object:
    """ship.json ``durable.enabled``: the DBOS-backed executor (imported here, on first use)."""
    try:
        from .durable._runtime import DurableExecutor
    except ImportError as exc:
        raise ConfigError(
            f"durable.enabled needs the durable extra: pip install 'shipagent[durable]' ({exc})",
            path="durable.enabled",
        ) from None
    return DurableExecutor(agent, **agent.turn_executor_options)


_executor_factories.setdefault("durable", _durable_executor)  # type: ignore[arg-type]

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
    "Problem",
    "ProjectLockedError",
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
    "check_project",
    "current_tool_context",
    "load_config",
]
