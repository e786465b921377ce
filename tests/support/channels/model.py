"""The conformance project's scripted model: what it answers depends on a tag in the user's text.

One model serves every scenario of a shared project, so the scenario picks the behaviour by what
it writes: ``#shell`` asks to run a command (which needs an approval), ``#long`` gets a long answer
with code blocks, ``#stream`` gets an answer streamed slowly enough to be seen growing; anything
else is echoed. Every request is recorded, to check what reached the model and with what context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from tests.support.core import last_user_text

__all__ = ["APPROVED_FILE", "CODE_LINES", "LONG_ANSWER", "STREAM_ANSWER", "ScenarioModel", "user_prompts"]

CODE_LINES = [f"total += {i}  # line {i}" for i in range(150)]
"""The code of each of the long answer's two blocks (about 4,000 characters a block)."""
LONG_ANSWER = "Intro **text**.\n\n" + "\n\n".join(
    f"Part {n}: " + "lorem ipsum " * 40 + "\n\n```python\n" + "\n".join(CODE_LINES) + "\n```"
    for n in range(2)
)
STREAM_ANSWER = "Streaming " + " ".join(f"word{i}" for i in range(24)) + " done"
"""Plain words: every platform shows them as they are, so the final text is comparable."""
APPROVED_FILE = "approved.txt"


def user_prompts(messages: list[ModelMessage]) -> int:
    """How many user prompts a request carries (its context plus the new one)."""
    return sum(isinstance(p, UserPromptPart) for m in messages for p in getattr(m, "parts", []))


class ScenarioModel:
    """Records every request and answers by the tag in the last user text."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []
        self.model = FunctionModel(self._call, stream_function=self._stream, model_name="conformance")

    def saw(self, token: str) -> list[list[ModelMessage]]:
        """The requests whose new user text contains ``token``."""
        return [r for r in self.requests if token in last_user_text(r) and not _continues(r)]

    def _answer(self, messages: list[ModelMessage]) -> tuple[ModelResponse, int, float]:
        self.requests.append(list(messages))
        if _continues(messages):
            returns = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
            return ModelResponse(parts=[TextPart(f"finished: {str(returns[0].content)[:60]}")]), 50, 0.0
        said = last_user_text(messages)
        if "#shell" in said:
            call = ToolCallPart("exec_shell", {"command": f"echo ok > {APPROVED_FILE}"}, tool_call_id="s1")
            return ModelResponse(parts=[call]), 50, 0.0
        if "#long" in said:
            return ModelResponse(parts=[TextPart(LONG_ANSWER)]), 1500, 0.0
        if "#stream" in said:
            return ModelResponse(parts=[TextPart(STREAM_ANSWER)]), 6, 0.05
        return ModelResponse(parts=[TextPart(f"echo: {said}")]), 50, 0.0

    def _call(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return self._answer(messages)[0]

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response, chunk, delay = self._answer(messages)
        for n, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                for start in range(0, len(part.content), chunk):
                    if delay:
                        await anyio.sleep(delay)
                    yield part.content[start : start + chunk]
            elif isinstance(part, ToolCallPart):
                yield {
                    n: DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)
                }


def _continues(messages: list[ModelMessage]) -> bool:
    """Whether this request carries a tool's result (the turn goes on) rather than a new message."""
    return any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", []))
