"""A scripted model that answers plain and streamed requests from the same script.

``ScriptedModel`` in ``_core_support`` only answers non-streamed requests; a streamed turn
(``run_stream``, ``shipagent serve``) asks the model for a stream. ``StreamScript`` plays one
:class:`ModelResponse` per request either way: whole, or as text chunks of ``chunk`` characters
followed by the tool calls as deltas, so the same script drives both paths and the requests each
path sends can be compared.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from tests.support.core import last_user_text

Reply = Callable[[list[ModelMessage], AgentInfo, int], ModelResponse]


class StreamScript:
    """Records every request and answers with ``reply(messages, info, n)`` (default: echo).

    Args:
        reply: the script; ``n`` counts requests from 1.
        chunk: characters per streamed text delta.
        delay: seconds to sleep before each streamed chunk (to cancel mid-stream).
    """

    def __init__(self, reply: Reply | None = None, *, chunk: int = 4, delay: float = 0.0) -> None:
        self.requests: list[list[ModelMessage]] = []
        self.streamed: list[bool] = []
        self.chunk = chunk
        self.delay = delay
        self.chunks_sent = 0
        self.started = anyio.Event()
        self._reply = reply
        self.model = FunctionModel(self._call, stream_function=self._stream, model_name="script")

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        if self._reply is not None:
            return self._reply(list(messages), info, len(self.requests))
        return ModelResponse(parts=[TextPart(f"echo: {last_user_text(messages)}")])

    def _call(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.streamed.append(False)
        return self._answer(messages, info)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        self.streamed.append(True)
        response = self._answer(messages, info)
        self.started.set()
        index = 0
        for part in response.parts:
            if isinstance(part, TextPart):
                for start in range(0, len(part.content), self.chunk):
                    if self.delay:
                        await anyio.sleep(self.delay)
                    self.chunks_sent += 1
                    yield part.content[start : start + self.chunk]
            elif isinstance(part, ToolCallPart):
                index += 1
                args = part.args if isinstance(part.args, str) else json.dumps(part.args or {})
                yield {index: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}
