"""Failures a user sees, in words that say what to change.

A turn that fails returns ``AgentResult(success=False, output=...)`` and the CLI prints that text;
pydantic-ai's and the SDKs' own messages talk about their classes (``OpenAIProvider(api_key=...)``,
``Agent('test')``) or say only "Connection error.". :func:`explain_failure` maps the known kinds
— no connection, timeout, rejected key, unknown model, rate limit, server error — to one sentence
naming the URL, the ship.json key or the environment variable, and scrubs what it does not know.
"""

from __future__ import annotations

import re

import anyio
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
    UserError,
)

from ..config import LlmConfig
from .models import model_provider

__all__ = ["explain_failure", "scrub"]

_INTERNALS = (
    # pydantic-ai's advice to library users: "or pass it via `OpenAIProvider(api_key=...)`"
    (re.compile(r"\s*or pass it via `?\w+\([^)]*\)`?"), ""),
    (re.compile(r"\s*To try Pydantic AI without an API key[^\n]*"), ""),
    (re.compile(r"[Cc]ancel(?:l?ed)? (?:via|by) cancel scope [0-9a-fx]+"), "cancelled"),
    (re.compile(r"\s*See https://pydantic\.dev/\S*"), ""),
)


def scrub(text: str) -> str:
    """Remove library internals (class constructors, cancel-scope ids, doc links) from ``text``."""
    for pattern, replacement in _INTERNALS:
        text = pattern.sub(replacement, text)
    return text.strip()


def _root_cause(exc: BaseException) -> str:
    """The innermost transport reason (``[Errno 111] Connection refused``), if there is one."""
    seen: set[int] = set()
    reason = ""
    current: BaseException | None = exc.__cause__ or exc.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip()
        if text and text not in ("Connection error.", "Request timed out."):
            reason = text
        current = current.__cause__ or current.__context__
    return reason


def _key_hint(llm: LlmConfig | None) -> str:
    provider = model_provider(llm) if llm is not None else None
    if provider in (None, "openai", "openai-compatible", "openai_compatible"):
        return "set OPENAI_API_KEY or llm.apiKey in ship.json"
    return f"set the {provider} API key (its environment variable, or llm.apiKey in ship.json)"


def explain_failure(exc: BaseException, *, url: str | None = None, llm: LlmConfig | None = None) -> str:
    """One sentence for why a model request failed and what to change.

    Args:
        exc: what ended the run.
        url: the model server's base URL, when known (named in connection errors).
        llm: ship.json ``llm`` (for the timeout, retries and key hints).
    """
    at = f" at {url}" if url else ""
    retries = llm.max_retries if llm is not None else 0
    tried = f" (tried {retries + 1} times)" if retries else ""
    if isinstance(exc, ModelRequestTimeout) or (
        isinstance(exc, TimeoutError) and not isinstance(exc, ModelAPIError)
    ):
        limit = f"{llm.timeout_seconds:g} s" if llm is not None and llm.timeout_seconds else "the time limit"
        return (
            f"The model server{at} did not answer within {limit}, retries included. Raise "
            f"llm.timeoutSeconds in ship.json, or check that the server is up."
        )
    if isinstance(exc, ModelTimeoutError):
        return f"The request to the model server{at} timed out{tried}. Check the server, or raise llm.timeoutSeconds."
    if isinstance(exc, ModelConnectionError):
        cause = _root_cause(exc)
        because = f" ({cause})" if cause else ""
        return (
            f"Cannot reach the model server{at}{because}{tried}. Check llm.baseUrl in ship.json and that the "
            f"server is running."
        )
    status = f"HTTP {exc.status_code}" if isinstance(exc, ModelHTTPError) else ""
    if isinstance(exc, ModelAuthenticationError) or (
        isinstance(exc, ModelHTTPError) and exc.status_code in (401, 403)
    ):
        return f"The model server{at} rejected the API key ({status or 'unauthorized'}): {_key_hint(llm)}."
    if isinstance(exc, ModelNotFoundError) or (isinstance(exc, ModelHTTPError) and exc.status_code == 404):
        name = exc.model_name if isinstance(exc, ModelAPIError) else "?"
        return f"The model server{at} does not know model {name!r} ({status or 'not found'}). Check llm.model in ship.json."
    if isinstance(exc, ModelQuotaExceededError):
        return (
            f"The model provider{at} says the account's quota or credits are used up: {scrub(str(exc))[:300]}"
        )
    if isinstance(exc, ModelRateLimitError) or (isinstance(exc, ModelHTTPError) and exc.status_code == 429):
        return (
            f"The model server{at} is rate-limiting requests ({status or '429'}){tried}. Wait and try again, "
            f"or raise llm.maxRetries in ship.json."
        )
    if isinstance(exc, ModelUnavailableError | ModelServerError) or (
        isinstance(exc, ModelHTTPError) and exc.status_code >= 500
    ):
        return f"The model server{at} failed ({status or type(exc).__name__}){tried}: {scrub(str(exc))[:300]}"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "The turn was cancelled."
    if isinstance(exc, UserError):
        return f"Model configuration problem: {scrub(str(exc))}"
    text = scrub(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
