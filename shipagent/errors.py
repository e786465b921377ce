"""The exceptions shipagent raises.

Every exception derives from one root, so ``except ShipAgentError`` catches all of ours and nothing
of anybody else's::

    ShipAgentError
     ├── ConfigError        ship.json / .env / mcp.json is wrong: the message names the key path
     ├── ChatKeyError       a chat key is empty, too long or holds control characters
     ├── ToolContextError   current_tool_context() was called outside a run
     ├── BadRequestError    a handover / packing request is malformed (wrong type, missing field)
     ├── NotFoundError      a card, box, profile or context ref does not exist
     ├── ProjectLockedError another process has the project open (holds ``.ship/lock``)
     └── LedgerReferenceError (``shipagent.agent.ledger``, also a ``ValueError``) a ledger line
                            refers to an earlier record that is missing or damaged

Failures *inside* a run (model errors, tool crashes, limits) are not raised: they come back as
``AgentResult(success=False, ...)`` so a caller's loop over chats never dies on one bad turn.
"""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "ChatKeyError",
    "ConfigError",
    "NotFoundError",
    "ProjectLockedError",
    "ShipAgentError",
    "ToolContextError",
]


class ShipAgentError(Exception):
    """Root of every exception shipagent raises."""


class ConfigError(ShipAgentError):
    """The project's configuration is invalid.

    Attributes:
        path: the key path that is wrong (``llm.model``, ``mcp.servers.git.command``), or ``None``
            when the whole file is at fault (a JSON syntax error).
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ChatKeyError(ShipAgentError, ValueError):
    """A chat key cannot be used (empty, too long, control characters)."""


class ToolContextError(ShipAgentError, RuntimeError):
    """``current_tool_context()`` was called while no run is in progress."""


class BadRequestError(ShipAgentError, ValueError):
    """A request is malformed: a missing field or a value of the wrong type."""


class NotFoundError(ShipAgentError, LookupError):
    """The thing asked for (card, box, profile, context ref) does not exist."""


class ProjectLockedError(ShipAgentError):
    """Another process holds the project's ``.ship/lock``: two writers would lose each other's turns.

    Attributes:
        pid: the holder's process id, when it could be read from the lock file.
        command: the holder's command (program and subcommand), when known.
    """

    def __init__(self, message: str, *, pid: int | None = None, command: str | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.command = command
