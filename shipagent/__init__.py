"""shipagent: a runtime for chat agents on pydantic-ai whose context stays bounded and inspectable."""

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
