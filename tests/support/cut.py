"""Scripted models whose answers are cut: by the token limit, or by the time limit mid-stream.

A provider says why an answer ended; pydantic-ai puts it in ``ModelResponse.finish_reason``
(``"length"`` when ``max_tokens`` ran out). A ``FunctionModel`` answering whole returns that
response itself. Its streamed response has no way to say it, so :class:`CutScript`'s model sets
the public ``finish_reason`` field of the ``StreamedResponse`` when it opens, which is what a
provider's model does once the provider's last chunk arrives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from tests.support.core import last_user_text

CUT_TEXT = "The first half of a long answer, stopped where the token limit"


class _LengthModel(FunctionModel):
    """A FunctionModel whose streamed answers end at the token limit too."""

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with super().request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as response:
            response.finish_reason = "length"
            yield response


class CutScript:
    """Answers every request with ``text``; whole, or streamed in ``chunk``-character pieces.

    Args:
        text: the answer (``{said}`` is replaced by the user's last message).
        length: say the answer stopped at the token limit (``finish_reason="length"``).
        hang_after: stream only this many pieces, then wait (for the time limit to cut it);
            ``0`` waits before the first one.
    """

    def __init__(
        self, text: str = CUT_TEXT, *, chunk: int = 8, length: bool = True, hang_after: int | None = None
    ) -> None:
        self.text = text
        self.chunk = chunk
        self.hang_after = hang_after
        self.requests: list[list[ModelMessage]] = []
        model_class = _LengthModel if length else FunctionModel
        self.length = length
        self.model = model_class(self._whole, stream_function=self._stream, model_name="cut-script")

    def _answer(self, messages: list[ModelMessage]) -> str:
        self.requests.append(list(messages))
        return self.text.replace("{said}", last_user_text(messages))

    def _whole(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart(self._answer(messages))], finish_reason="length" if self.length else None
        )

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        text = self._answer(messages)
        pieces = [text[i : i + self.chunk] for i in range(0, len(text), self.chunk)]
        for index, piece in enumerate(pieces):
            if index == self.hang_after:
                await anyio.sleep(3600)  # cancelled by llm.timeoutSeconds
            yield piece
        if self.hang_after is not None and self.hang_after >= len(pieces):
            await anyio.sleep(3600)

    def streamed_before_the_hang(self) -> str:
        """The text a stream cut by the time limit had sent."""
        assert self.hang_after is not None
        return self.text[: self.hang_after * self.chunk]
