"""The OpenAI Chat Completions wire format over shipagent turns.

An OpenAI client resends the whole conversation on every request; shipagent keeps its own history
per chat key (bounded, compacted, persisted), so only the **last user message** is the turn. The
rest of ``messages`` is ignored — including a system message: the agent's instructions come from
``Agent.md``, and a response header says a system message was ignored, so it is never a silent
surprise. The chat key comes from the ``X-Chat-Key`` header, else the ``user`` field.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...results import AgentResult
from ._wire import ApiError

__all__ = [
    "IGNORED_HEADER",
    "CompletionRequest",
    "chunk",
    "completion",
    "finish_reason",
    "parse_completion_request",
]

IGNORED_HEADER = "X-Shipagent-Ignored"
"""Set to ``system-message`` when a request's system message was not used."""


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    chat_key: str
    text: str
    model: str
    stream: bool
    ignored_system: bool


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": "..."}, ...]
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    raise ApiError(400, "invalid_request", f"{where}.content must be a string or a list of text parts")


def parse_completion_request(body: Any, headers: Mapping[str, str]) -> CompletionRequest:
    """Validate a Chat Completions request and pick the turn out of it."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", "the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "invalid_request", "'messages' must be a non-empty list")
    last_user: str | None = None
    ignored_system = False
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(400, "invalid_request", f"messages[{index}] must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            ignored_system = True
        elif role == "user":
            last_user = _text_of(message.get("content"), f"messages[{index}]")
    if last_user is None:
        raise ApiError(400, "invalid_request", "'messages' holds no user message: nothing to answer")
    chat_key = headers.get("x-chat-key") or body.get("user")
    if not isinstance(chat_key, str) or not chat_key:
        raise ApiError(
            400,
            "missing_chat_key",
            "no chat key: send the X-Chat-Key header or the request's 'user' field",
        )
    model = body.get("model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "invalid_request", "'stream' must be true or false")
    return CompletionRequest(
        chat_key, last_user, model if isinstance(model, str) else "", stream, ignored_system
    )


def finish_reason(result: AgentResult) -> str:
    """The Chat Completions ``finish_reason`` of a finished turn.

    OpenAI's vocabulary has no time limit: an answer cut by ``llm.timeoutSeconds`` is
    ``"length"`` too, the value its clients already treat as "this answer is incomplete" (the
    native API's ``finishReason`` tells the two apart).
    """
    if result.finish_reason == "content_filter":
        return "content_filter"
    return "length" if result.cut else "stop"


def _usage(result: AgentResult) -> dict[str, int]:
    prompt, completion_tokens = result.usage.input_tokens, result.usage.output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def completion(result: AgentResult, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for a finished turn."""
    return {
        "id": f"chatcmpl-{result.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.output, "refusal": None},
                "finish_reason": finish_reason(result),
                "logprobs": None,
            }
        ],
        "usage": _usage(result),
    }


def chunk(
    completion_id: str,
    model: str,
    created: int,
    *,
    content: str | None = None,
    role: bool = False,
    result: AgentResult | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``: a content delta, or (with ``result``) the finishing chunk."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    data: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": finish_reason(result) if result is not None else None,
                "logprobs": None,
            }
        ],
    }
    if result is not None:
        data["usage"] = _usage(result)
    return data
