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
from .events import ApprovalRequired, Compacted, Done, TextDelta, ToolFinished, ToolStarted
from .execution import (
    ApprovalRequest,
    InjectionResult,
    ToolExecutionContext,
    current_tool_context,
)
from .results import AgentResult, StepEvent, ToolCallRecord

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
    "current_tool_context",
    "load_config",
]
