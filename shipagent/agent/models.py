"""Turning ship.json ``llm`` into a pydantic-ai model and its settings.

``provider: "local"`` is the embedded model (``shipagent.agent._local_model``): an OpenAI-compatible
chat model on llama.cpp's server, which the agent starts and stops (``modelPath`` picks the GGUF).

Every ``llm`` field is applied: ``baseUrl`` and ``apiKey`` go to the
provider, ``temperature``, ``maxTokens`` and ``timeoutSeconds`` to the model settings, and
``maxRetries`` to the :class:`~shipagent.agent._retry.RetryingModel` every model is wrapped in.

Mistakes become a :class:`ConfigError` that names what to change — the environment variable, the
ship.json key — never pydantic-ai's own advice about its classes (``OpenAIProvider(api_key=...)``).
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from functools import cache
from typing import Any, cast

from pydantic_ai.models import Model, infer_model
from pydantic_ai.providers import Provider, infer_provider_class
from pydantic_ai.settings import ModelSettings

from ..config import LlmConfig
from ..errors import ConfigError
from ._retry import RetryingModel

__all__ = [
    "build_model",
    "build_model_settings",
    "describe_model",
    "known_providers",
    "model_provider",
]

_OPENAI_LIKE = {"openai", "openai-compatible", "openai_compatible"}
_COMPATIBLE = {"openai-compatible", "openai_compatible"}
_ENV_VAR = re.compile(r"`([A-Z][A-Z0-9_]*)` environment variable")
_FALLBACK_PROVIDERS = [
    "anthropic",
    "azure",
    "bedrock",
    "cerebras",
    "cohere",
    "deepseek",
    "fireworks",
    "github",
    "google",
    "google-cloud",
    "groq",
    "heroku",
    "huggingface",
    "litellm",
    "mistral",
    "moonshotai",
    "nebius",
    "ollama",
    "openai",
    "openrouter",
    "together",
    "vercel",
    "vllm",
    "xai",
]


@cache
def known_providers() -> tuple[str, ...]:
    """The provider names pydantic-ai accepts (read from its own lookup), plus ``openai-compatible``."""
    try:
        found = set(re.findall(r"case '([a-z0-9-]+)'", inspect.getsource(infer_provider_class)))
    except (OSError, TypeError):  # source not available (a zipped install): the common ones
        found = set(_FALLBACK_PROVIDERS)
    return tuple(sorted(found | {"openai-compatible", "local"}))


def _is_known(provider: str) -> bool:
    if provider in _OPENAI_LIKE or provider in ("test", "local"):
        return True
    try:
        infer_provider_class(provider)
    except ValueError:
        return False
    return True


def _unknown_provider(provider: str, key: str) -> ConfigError:
    close = difflib.get_close_matches(provider, known_providers(), n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(known_providers())})"
    return ConfigError(f"{key}: unknown provider {provider!r}{hint}", path=key)


def _resolve(llm: LlmConfig, override: str | None) -> LlmConfig:
    """The ``llm`` section a model-string override stands for.

    A bare name (``-m gpt-5-mini``) replaces only ``llm.model``: ship.json's ``provider``,
    ``baseUrl`` and ``apiKey`` still apply. A ``provider:name`` string brings its own provider.
    """
    if override is None:
        return llm
    if ":" in override:
        return llm.model_copy(update={"model": override, "provider": None, "base_url": None, "api_key": None})
    return llm.model_copy(update={"model": override})


def _prefixed(llm: LlmConfig) -> bool:
    """Whether ``llm.model`` starts with a provider (``openai:gpt-5-mini``).

    With ``llm.provider`` set, a colon that follows no known provider is part of the model's own
    name — Ollama's tags (``qwen2.5:7b``) — and the whole name goes to that provider.
    """
    name = llm.model or ""
    if ":" not in name:
        return False
    return not llm.provider or _is_known(name.split(":", 1)[0].lower())


def model_provider(llm: LlmConfig) -> str | None:
    """The provider a turn will use: the ``provider:`` prefix of ``llm.model``, else ``llm.provider``."""
    if _prefixed(llm):
        return (llm.model or "").split(":", 1)[0].lower()
    return (llm.provider or "").lower() or None


def _explain_build_error(exc: Exception, name: str, llm: LlmConfig) -> ConfigError:
    text = str(exc)
    match = _ENV_VAR.search(text)
    if match:
        return ConfigError(
            f"llm.model {name!r} needs an API key: set the environment variable {match.group(1)} "
            f"(or llm.apiKey in ship.json)",
            path="llm.apiKey",
        )
    if isinstance(exc, ImportError):
        return ConfigError(f"llm.model {name!r}: {text}", path="llm.model")
    if text.startswith("Unknown model"):
        if ":" not in name:
            return ConfigError(
                f"llm.model {name!r} names no provider: write it as 'provider:{name}' "
                f"(e.g. 'openai:{name}') or set llm.provider",
                path="llm.model",
            )
        return _unknown_provider(name.split(":", 1)[0], "llm.model")
    first = text.split(". ")[0].strip()
    return ConfigError(f"llm.model: cannot use model {name!r}: {first}", path="llm.model")


def _provider_factory(llm: LlmConfig) -> Any:
    """A pydantic-ai provider factory that applies ``llm.apiKey`` / ``llm.baseUrl`` to any provider."""

    def make(provider: str) -> Provider[Any]:
        cls = infer_provider_class(provider)
        kwargs = {k: v for k, v in (("api_key", llm.api_key), ("base_url", llm.base_url)) if v}
        try:
            return cls(**kwargs)  # type: ignore[call-arg]
        except TypeError:  # this provider takes other arguments: let it read its environment
            return cls()

    return make


def build_model(llm: LlmConfig, override: Model | str | None = None) -> Model:
    """The model for runs: ``override`` (a ``Model`` or model string) or the one ship.json names.

    The result is a :class:`RetryingModel` doing ``llm.maxRetries`` announced retries.

    Raises:
        ConfigError: no model configured, an unknown provider, a missing API key, or pydantic-ai
            cannot build the model named — each naming the ship.json key or variable to change.
    """
    if isinstance(override, RetryingModel):
        return override
    if isinstance(override, Model):
        return RetryingModel(override, max_retries=llm.max_retries)
    llm = _resolve(llm, override)
    name = llm.model
    prefixed = _prefixed(llm)
    if (llm.provider or "").lower() == "local" and not prefixed:
        from ._local_model import build_local_model  # the embedded model: started with the agent

        return RetryingModel(build_local_model(llm), max_retries=llm.max_retries)
    if not name:
        raise ConfigError(
            'llm.model is not set: put a model in ship.json (e.g. "openai:gpt-5-mini") or pass '
            "model= to ShipAgent.from_project (-m on the command line)",
            path="llm.model",
        )
    provider = (llm.provider or "").lower()
    if provider and not prefixed and not _is_known(provider):
        raise _unknown_provider(provider, "llm.provider")
    if provider in _COMPATIBLE and not llm.base_url:
        raise ConfigError(
            "llm.baseUrl is not set: an openai-compatible provider needs the server's URL "
            '(e.g. "http://localhost:8000/v1")',
            path="llm.baseUrl",
        )
    try:
        if not prefixed and (provider in _OPENAI_LIKE or llm.base_url):
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            key = llm.api_key or os.environ.get("OPENAI_API_KEY")
            if not key and provider not in _COMPATIBLE and not llm.base_url:
                raise ConfigError(
                    f"llm.model {name!r} needs an API key: set the environment variable "
                    "OPENAI_API_KEY (or llm.apiKey in ship.json)",
                    path="llm.apiKey",
                )
            model: Model = OpenAIChatModel(
                name, provider=OpenAIProvider(base_url=llm.base_url, api_key=key or "not-set")
            )
        else:
            if provider and not prefixed:
                name = f"{provider}:{name}"
            if ":" in name and not _is_known(name.split(":", 1)[0].lower()):
                raise _unknown_provider(name.split(":", 1)[0], "llm.model")
            model = infer_model(name, _provider_factory(llm))
    except ConfigError:
        raise
    except Exception as exc:  # pydantic-ai raises UserError / ImportError / ValueError here
        raise _explain_build_error(exc, name, llm) from None
    return RetryingModel(model, max_retries=llm.max_retries)


def _is_anthropic(llm: LlmConfig) -> bool:
    return (llm.provider or "").lower() == "anthropic" or (llm.model or "").startswith("anthropic:")


def build_model_settings(llm: LlmConfig) -> ModelSettings:
    """Model settings from ship.json ``llm``: the provider SDK never retries on its own (we do, visibly).

    With Anthropic, cache breakpoints on the instructions and the tool definitions are on by
    default: shipagent keeps that prefix byte-identical across requests and turns,
    so every request after the first reads it from the cache.
    """
    settings: ModelSettings = {"max_retries": 0}
    if _is_anthropic(llm):
        settings.update(
            cast(
                ModelSettings,
                {"anthropic_cache_instructions": True, "anthropic_cache_tool_definitions": True},
            )
        )
    if llm.temperature is not None:
        settings["temperature"] = llm.temperature
    if llm.max_tokens is not None:
        settings["max_tokens"] = llm.max_tokens
    if llm.timeout_seconds is not None:
        settings["timeout"] = llm.timeout_seconds  # one attempt
        settings["request_timeout"] = llm.timeout_seconds  # the whole request, retries included
    return settings


def describe_model(llm: LlmConfig) -> str:
    """A one-line description for ``shipagent check`` (never includes the API key)."""
    local = (llm.provider or "").lower() == "local"
    parts = [llm.model or ("embedded model" if local else "<no model>")]
    if llm.provider:
        parts.append(f"provider={llm.provider}")
    if llm.model_path:
        parts.append(f"modelPath={llm.model_path}")
    if llm.base_url:
        parts.append(f"baseUrl={llm.base_url}")
    if llm.api_key:
        parts.append("apiKey=<set>")
    timeout = f"{llm.timeout_seconds:g}s" if llm.timeout_seconds else "none (the SDK's own)"
    parts.append(f"timeoutSeconds={timeout} maxRetries={llm.max_retries}")
    return " ".join(parts)
