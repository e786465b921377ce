"""``shipagent check``'s probe of the model server: one cheap request that proves server, key and model.

:func:`check_project` never touches the network; this does, once, with a timeout, so that
``shipagent check`` fails when the first turn would: the server is down, the key is refused, the
model does not exist. Each failure is a :class:`Problem` in our words — what failed, the URL, what
to change — with the SDK's or server's own text only as its ``detail``. The API key is never
printed: it is cut out of every detail.

What the probe costs, per provider:

- Any OpenAI-compatible API (``openai``, ``openai-compatible``, a ``baseUrl``, and pydantic-ai
  providers speaking that API through the ``openai`` SDK): ``GET /models`` — free everywhere. If
  the model is listed, done. The official OpenAI API lists every model a key may use, so an
  unlisted one is unknown. Other servers list what they have loaded (llama.cpp, vLLM) or under
  other spellings (Ollama's ``name:latest``), so for them an unlisted model gets a 1-token chat
  completion, which answers 404 for a model the server does not have.
- ``test`` / function models: nothing to probe (they answer in-process).
- ``local`` (an engine started with the agent): not probed here, unless a probe is registered in
  :data:`PROBES` (the place for other providers' probes too).
- Other providers: not probed yet; ``check`` says so in one line.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.models.wrapper import WrapperModel

from ...agent.models import model_provider
from ...config import LlmConfig
from ._checks import Problem

__all__ = ["DEFAULT_TIMEOUT", "PROBES", "ProbeReport", "probe_model_server"]

DEFAULT_TIMEOUT = 10.0
"""Seconds the probe waits for the server (``shipagent check --timeout``)."""

_OFFICIAL_OPENAI = "api.openai.com"


@dataclass(slots=True)
class ProbeReport:
    """What the probe found: ``problems`` (empty when the server, key and model work) and one
    ``note`` line saying what was proven or why nothing was probed."""

    note: str
    problems: list[Problem] = field(default_factory=list)


Probe = Callable[[LlmConfig, Model, float], Awaitable[ProbeReport]]
"""``(ship.json llm, the built model, timeout in seconds) -> report``; one cheap request at most."""

PROBES: dict[str, Probe] = {}
"""Probes by provider name (``model_provider(llm)``), tried before the built-in ones.

A provider whose model runs inside the agent (``local``) registers a probe here that loads it, or
leaves it out: it is then skipped with a note.
"""

_SKIPPED = {
    "local": "the embedded engine starts with the agent; `shipagent chat` shows whether it loads",
}


def _unwrap(model: Model) -> Model:
    while isinstance(model, WrapperModel):
        model = model.wrapped
    return model


def shown_url(url: str) -> str:
    """``url`` without user:password, query or fragment (none of them belongs in a message)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class _Redactor:
    """Cuts the API key out of text from the SDK or the server (some servers echo it back)."""

    def __init__(self, key: str | None) -> None:
        self.key = key if key and len(key) >= 4 else None

    def __call__(self, text: str) -> str:
        return text.replace(self.key, "<apiKey>") if self.key else text


def _detail(exc: BaseException, redact: _Redactor) -> str:
    """The library's text, and the cause's (``Connection error.`` says little without it)."""
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({type(cause).__name__}: {cause})"
    return redact(text)


def _key_hint(llm: LlmConfig) -> str:
    if llm.api_key:
        return "llm.apiKey in ship.json (or the variable it names)"
    return "the environment variable OPENAI_API_KEY (or set llm.apiKey in ship.json)"


def _listed(name: str, ids: list[str]) -> bool:
    return name in ids or f"{name}:latest" in ids


def _unknown_model(url: str, name: str, ids: list[str] | None, detail: str | None) -> Problem:
    close = difflib.get_close_matches(name, ids or [], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return Problem(
        "error",
        f"llm.model: the model server at {url} has no model {name!r}{hint}: check llm.model"
        + (f" against GET {url}/models" if ids is not None else ""),
        "llm.model",
        detail,
    )


async def _probe_openai(client: Any, name: str, llm: LlmConfig, timeout_seconds: float) -> ProbeReport:
    """The model's own client (URL, key, headers) on a connection pool of its own, closed after.

    pydantic-ai shares one HTTP client among the models of a process; connections the probe left
    in it would belong to an event loop that has ended.
    """
    import openai

    async with openai.DefaultAsyncHttpxClient(timeout=timeout_seconds) as http:
        own = client.with_options(timeout=timeout_seconds, max_retries=0, http_client=http)
        return await _ask_openai(own, name, llm, timeout_seconds)


async def _ask_openai(client: Any, name: str, llm: LlmConfig, timeout_seconds: float) -> ProbeReport:
    """``GET /models``, and a 1-token completion when a non-OpenAI server does not list the model."""
    import openai

    url = shown_url(str(client.base_url))
    redact = _Redactor(client.api_key)
    # with llm.baseUrl the URL is the user's to fix; without it, the provider's own URL is right
    where, check_where = (
        ("llm.baseUrl", "is it running, and is llm.baseUrl right?")
        if llm.base_url
        else ("llm.model", "is this machine online? (set llm.baseUrl for another server)")
    )

    def failure(exc: Exception, asked: str) -> Problem | None:
        """The problem ``exc`` proves, or ``None`` when it says nothing about server, key or model."""
        detail = _detail(exc, redact)
        if isinstance(exc, openai.APITimeoutError):
            return Problem(
                "error",
                f"{where}: the model server at {url} did not answer {asked} within {timeout_seconds:g} s: "
                f"{check_where} (`shipagent check --timeout` waits longer)",
                where,
                detail,
            )
        if isinstance(exc, openai.APIConnectionError):
            return Problem(
                "error",
                f"{where}: cannot reach the model server at {url}: {check_where}",
                where,
                detail,
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            verb = "rejected the API key" if exc.status_code == 401 else "refused this API key access"
            return Problem(
                "error",
                f"llm.apiKey: the model server at {url} {verb} (HTTP {exc.status_code}): check "
                + _key_hint(llm),
                "llm.apiKey",
                detail,
            )
        if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
            return Problem(
                "error",
                f"{where}: the model server at {url} failed {asked} (HTTP {exc.status_code}): a turn "
                "would fail the same way now; check the server's log",
                where,
                detail,
            )
        return None

    ids: list[str] | None = None
    try:
        page = await client.models.list()
        ids = [str(model.id) for model in page.data]
    except (openai.APIStatusError, openai.APIConnectionError) as exc:  # a 404 or 405: no list here
        problem = failure(exc, "GET /models")
        if problem is not None:
            return ProbeReport(f"model server {url}: probe failed (below)", [problem])
    except Exception:  # an answer that is not a model list: the completion below decides
        ids = None
    if ids is not None and _listed(name, ids):
        return ProbeReport(f"model server {url}: reachable, API key accepted, model {name!r} listed")
    if ids is not None and urlsplit(url).hostname == _OFFICIAL_OPENAI:
        return ProbeReport(
            f"model server {url}: probe failed (below)", [_unknown_model(url, name, ids, None)]
        )
    try:  # one token, so a server that loaded the model under another listing name still passes
        await client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "ping"}], max_tokens=1
        )
    except openai.APIError as exc:
        problem = failure(exc, "a 1-token chat completion")
        status = getattr(exc, "status_code", None)
        if problem is None and (status == 404 or getattr(exc, "code", None) == "model_not_found"):
            if ids is None:
                problem = Problem(
                    "error",
                    f"llm.baseUrl: no OpenAI-compatible API at {url} (HTTP 404 for /models and "
                    "/chat/completions): check llm.baseUrl (it usually ends in /v1) and llm.model",
                    "llm.baseUrl",
                    _detail(exc, redact),
                )
            else:
                problem = _unknown_model(url, name, ids, _detail(exc, redact))
        if problem is None:  # a 400 about the request itself: the server and key work
            problem = Problem(
                "warning",
                f"the model server at {url} refused a 1-token request to model {name!r} "
                f"(HTTP {status}): the first turn may fail too",
                "llm.model",
                _detail(exc, redact),
            )
        return ProbeReport(
            f"model server {url}: probe {'failed' if problem.level == 'error' else 'answered'} (below)",
            [problem],
        )
    return ProbeReport(f"model server {url}: reachable, API key accepted, model {name!r} answers")


async def probe_model_server(
    llm: LlmConfig, model: Model, *, timeout_seconds: float = DEFAULT_TIMEOUT
) -> ProbeReport:
    """One cheap request to the server ``model`` talks to (see the module docstring for which).

    Never raises for what the server does: every outcome is a :class:`ProbeReport`.
    """
    provider = model_provider(llm) or ""
    if provider in PROBES:
        return await PROBES[provider](llm, model, timeout_seconds)
    if provider in _SKIPPED:
        return ProbeReport(f"model server: not probed (provider {provider}: {_SKIPPED[provider]})")
    inner = _unwrap(model)
    if isinstance(inner, TestModel | FunctionModel):
        return ProbeReport("model server: not probed (a test model answers in-process)")
    try:
        from openai import AsyncOpenAI
    except ImportError:  # pragma: no cover - pydantic-ai without the openai extra
        AsyncOpenAI = None  # type: ignore[assignment,misc]
    client = getattr(inner, "client", None)
    if AsyncOpenAI is not None and isinstance(client, AsyncOpenAI):
        try:
            return await _probe_openai(client, inner.model_name, llm, timeout_seconds)
        except Exception as exc:  # a bug or an SDK surprise must not hide the other checks
            url = shown_url(str(client.base_url))
            detail = _Redactor(client.api_key)(f"{type(exc).__name__}: {exc}")
            return ProbeReport(
                f"model server {url}: probe failed (below)",
                [Problem("warning", f"could not probe the model server at {url}", "llm.model", detail)],
            )
    return ProbeReport(
        f"model server: not probed (no probe for provider {provider or inner.system!r} yet; "
        "the first turn shows whether server, key and model work)"
    )
