"""Turning ship.json ``llm`` into a pydantic-ai model and its settings.

Unlike the seed system, every ``llm`` field is applied: ``baseUrl`` and ``apiKey`` go to the
provider, ``temperature``, ``maxTokens`` and ``timeoutSeconds`` to the model settings.
"""

from __future__ import annotations

from typing import cast

from pydantic_ai.models import Model, infer_model
from pydantic_ai.settings import ModelSettings

from .config import LlmConfig
from .errors import ConfigError

__all__ = ["build_model", "build_model_settings", "describe_model"]

_OPENAI_LIKE = {"openai", "openai-compatible", "openai_compatible"}


def build_model(llm: LlmConfig, override: Model | str | None = None) -> Model:
    """The model for runs: ``override`` (a ``Model`` or model string) or the one ship.json names.

    Raises:
        ConfigError: no model configured, or pydantic-ai cannot build the one named.
    """
    if isinstance(override, Model):
        return override
    name = override or llm.model
    if not name:
        raise ConfigError(
            'llm.model is not set: put a model in ship.json (e.g. "openai:gpt-5-mini") or pass '
            "model= to ShipAgent.from_project",
            path="llm.model",
        )
    provider = (llm.provider or "").lower()
    try:
        if override is None and (provider in _OPENAI_LIKE or (llm.base_url and ":" not in name)):
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            bare = name.split(":", 1)[1] if name.startswith("openai:") else name
            return OpenAIChatModel(
                bare, provider=OpenAIProvider(base_url=llm.base_url, api_key=llm.api_key or "not-set")
            )
        if provider and ":" not in name:
            name = f"{provider}:{name}"
        return infer_model(name)
    except ConfigError:
        raise
    except Exception as exc:  # pydantic-ai raises UserError / ImportError / ValueError here
        raise ConfigError(f"llm.model: cannot use model {name!r}: {exc}", path="llm.model") from None


def _is_anthropic(llm: LlmConfig) -> bool:
    return (llm.provider or "").lower() == "anthropic" or (llm.model or "").startswith("anthropic:")


def build_model_settings(llm: LlmConfig) -> ModelSettings:
    """Model settings from ship.json ``llm``.

    With Anthropic, cache breakpoints on the instructions and the tool definitions are on by
    default: shipagent keeps that prefix byte-identical across requests and turns (issue 13 §5),
    so every request after the first reads it from the cache.
    """
    settings: ModelSettings = {}
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
        settings["timeout"] = llm.timeout_seconds
    return settings


def describe_model(llm: LlmConfig) -> str:
    """A one-line description for ``shipagent check`` (never includes the API key)."""
    parts = [llm.model or "<no model>"]
    if llm.provider:
        parts.append(f"provider={llm.provider}")
    if llm.base_url:
        parts.append(f"baseUrl={llm.base_url}")
    if llm.api_key:
        parts.append("apiKey=<set>")
    return " ".join(parts)
