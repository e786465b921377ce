"""shipagent: a runtime for chat agents on pydantic-ai whose context stays bounded and inspectable."""

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

__all__ = [
    "ApprovalRequest",
    "BadRequestError",
    "ChatKeyError",
    "ConfigError",
    "InjectionResult",
    "NotFoundError",
    "ShipAgentError",
    "ShipConfig",
    "ToolContextError",
    "ToolExecutionContext",
    "current_tool_context",
    "load_config",
]
