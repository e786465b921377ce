"""Retrying a model request, with each retry reported as a ``retry`` step event.

The provider SDKs retry on their own (OpenAI and Anthropic twice) where nobody sees it: a user
stares at a silent prompt for minutes. shipagent turns the SDK's retries off (model setting
``max_retries=0``) and retries here instead, ``llm.maxRetries`` times, only for failures that may
pass (no connection, timeout of one attempt, HTTP 408/409/429/5xx), reporting each retry to the
run's listener. ``llm.timeoutSeconds`` bounds the whole request, retries included: it becomes
pydantic-ai's ``request_timeout``, a deadline around everything this wrapper does.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ..results import StepEvent

__all__ = ["RetryListener", "RetryingModel", "is_transient", "report_retries"]

RetryListener = Callable[[StepEvent], Awaitable[None]]
"""Receives one ``retry`` :class:`StepEvent` before each retry."""

RETRY_BASE_DELAY = 0.5
"""Seconds before the first retry; doubled for each further one (a provider's ``Retry-After`` wins)."""
RETRY_MAX_DELAY = 20.0
_TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

_listener: contextvars.ContextVar[RetryListener | None] = contextvars.ContextVar(
    "shipagent_retry_listener", default=None
)
"""The run's retry listener. pydantic-ai calls ``Model.request(messages, settings, parameters)``
without the run's ``RunContext`` (only ``request_stream`` gets one), so no parameter carries the
run to :class:`RetryingModel`; the turn sets this for its duration instead."""


@contextmanager
def report_retries(listener: RetryListener | None) -> Iterator[None]:
    """Send the retries of model requests made inside the block (this task) to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def is_transient(exc: BaseException) -> bool:
    """Whether sending the same request again may work (connection, timeout, 429, 5xx)."""
    if isinstance(exc, ModelConnectionError | ModelRateLimitError | ModelUnavailableError | ModelServerError):
        return True
    return isinstance(exc, ModelHTTPError) and exc.status_code in _TRANSIENT_STATUS


def _delay(exc: BaseException, retry: int) -> float:
    after = exc.retry_after if isinstance(exc, ModelAPIError) else None
    if after is not None and after >= 0:
        return float(min(after, RETRY_MAX_DELAY))
    return float(min(RETRY_BASE_DELAY * 2 ** (retry - 1), RETRY_MAX_DELAY))


def _short(exc: BaseException) -> str:
    """Why the attempt failed, in a few words (the SDK's own text is often just "Connection error.")."""
    if isinstance(exc, ModelHTTPError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, ModelConnectionError):
        what = "timed out" if "timeout" in type(exc).__name__.lower() else "no connection"
        url = getattr(getattr(exc.__cause__, "request", None), "url", None)
        return f"{what} to {url}" if url else what
    if isinstance(exc, ModelRateLimitError):
        return "rate limited"
    return "server unavailable"


class RetryingModel(WrapperModel):
    """Wrap a model: retry transient failures ``max_retries`` times, announcing each retry.

    Args:
        wrapped: the model to call.
        max_retries: how many times a request is sent again after a transient failure.
    """

    def __init__(self, wrapped: Any, *, max_retries: int = 1) -> None:
        super().__init__(wrapped)
        self.max_retries = max_retries

    async def _before_retry(self, exc: BaseException, retry: int) -> None:
        delay = _delay(exc, retry)
        listener = _listener.get()
        if listener is not None:
            await listener(
                StepEvent(
                    "retry",
                    f"model request failed ({_short(exc)}); retry {retry} of {self.max_retries} "
                    f"in {delay:.1f}s",
                    {"attempt": retry, "of": self.max_retries, "delaySeconds": delay, "error": _short(exc)},
                )
            )
        await anyio.sleep(delay)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        retry = 0
        while True:
            try:
                return await self.wrapped.request(messages, model_settings, model_request_parameters)
            except Exception as exc:
                if retry >= self.max_retries or not is_transient(exc):
                    raise
                retry += 1
                await self._before_retry(exc, retry)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        # Only opening the stream is retried: once text reached the caller, sending the request
        # again would show the user a second, different answer.
        retry = 0
        while True:
            stack = AsyncExitStack()
            try:
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(
                        messages, model_settings, model_request_parameters, run_context
                    )
                )
            except Exception as exc:
                await stack.aclose()
                if retry >= self.max_retries or not is_transient(exc):
                    raise
                retry += 1
                await self._before_retry(exc, retry)
                continue
            async with stack:
                yield stream
            return
