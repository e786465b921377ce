"""A turn as its caller asked for it: the chat, the user's text and the turn's options, checked once.

``ShipAgent.run``, ``run_stream``, ``run_sync`` and ``execute_turn`` take the same loose
arguments; each makes one :class:`TurnRequest`, which refuses what is unusable (a bad chat key, a
text that is not a string, a malformed request id) before anything runs, and from then on the
turn passes one value instead of seven keywords.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._steps import StepCallback
from ..chatkeys import validate_chat_key
from ..errors import ShipAgentError
from ..results import Sender
from ..tools.execution import ReplyChannel

__all__ = ["TurnRequest"]


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn to run: ``text`` in chat ``chat_key``, with the caller's options.

    Attributes:
        on_step: called with each step of the tool loop (tool calls, retries, text).
        channel: where ``chat_send`` and files go while the turn runs (a host's chat, a console).
        request_id: the turn's name (``None``: a fresh one is minted); a turn retried with the same
            id is committed once.
        sender: who wrote ``text`` in a chat with many speakers (the transcript records it).
        preface: context the model reads before ``text`` that nobody in particular said.

    Raises:
        ChatKeyError: the chat key is unusable.
        ShipAgentError: another argument is of the wrong kind.
    """

    chat_key: str
    text: str
    on_step: StepCallback | None = None
    channel: ReplyChannel | None = None
    request_id: str | None = None
    sender: Sender | None = None
    preface: str | None = None

    def __post_init__(self) -> None:
        validate_chat_key(self.chat_key)
        if not isinstance(self.text, str):
            raise ShipAgentError(f"text must be a string, got {type(self.text).__name__}")
        if self.sender is not None and not isinstance(self.sender, Sender):
            raise ShipAgentError(f"sender must be a shipagent.Sender, got {type(self.sender).__name__}")
        if self.preface is not None and not isinstance(self.preface, str):
            raise ShipAgentError(f"preface must be a string, got {type(self.preface).__name__}")
        request_id = self.request_id
        if request_id is not None and not (
            isinstance(request_id, str) and 0 < len(request_id) <= 200 and request_id.isprintable()
        ):
            raise ShipAgentError("request_id must be 1-200 printable characters")

    @property
    def prompt(self) -> str:
        """What the model reads: ``preface`` (if any), a blank line, then ``text`` — as
        ``Ada (id 7): text`` when a sender said it, so a model in a chat with many speakers knows
        who said what."""
        said = f"{self.sender.label}: {self.text}" if self.sender is not None else self.text
        return f"{self.preface}\n\n{said}" if self.preface else said
