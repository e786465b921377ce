"""What the provider's prompt cache means for compaction: how long it lasts, who summarises.

Both are read off ship.json ``llm`` once, when the agent is built. A local model (the embedded
``local`` provider, a server on a loopback address, Ollama) keeps its cache as long as it runs and
evaluates prompts slowly on a CPU; a hosted provider drops a prompt cache after minutes idle and
evaluates a summary request quickly. So:

* ``context.cache.ttlSeconds`` defaults to 300 s for hosted providers and 0 (never expires) for
  local ones and a model passed in code — a turn after a longer pause compacts early, when the
  compaction is free;
* ``context.chatHistory.summarizer: "auto"`` lets the model write summaries on hosted providers
  and keeps the mechanical extract for local ones (and for a model passed in code, whose cost
  shipagent cannot know).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic_ai.models import Model

from ..chatkeys import ShipPaths
from ..config import ShipConfig
from ..store.chats import ChatHistories
from ..store.reconcile import reconcile
from ..window.marks import marks_of
from ..window.summarizer import model_summarizer

if TYPE_CHECKING:
    from ..store._files import FileStores
    from ..store._protocols import ChatStore

__all__ = ["HOSTED_CACHE_TTL", "cache_ttl", "chat_histories", "is_local_model", "summarizes_with_model"]

HOSTED_CACHE_TTL = 300.0
"""Seconds a hosted provider keeps an idle prompt cached (OpenAI's and Anthropic's default is ~5 min)."""
_LOCAL_PROVIDERS = frozenset({"local", "ollama"})


def _loopback(url: str) -> bool:
    host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local_model(config: ShipConfig) -> bool:
    """Whether ship.json's model runs on this machine (a local provider or a loopback server)."""
    llm = config.llm
    if (llm.provider or "").lower() in _LOCAL_PROVIDERS:
        return True
    return llm.base_url is not None and _loopback(llm.base_url)


def _named(config: ShipConfig) -> bool:
    return config.llm.model is not None or config.llm.provider is not None


def cache_ttl(config: ShipConfig, *, model_in_code: bool) -> float:
    """``context.cache.ttlSeconds``, or the provider's default (0: the cache never expires).

    A model passed in code gets 0 unless ship.json says otherwise: shipagent cannot tell whose
    cache it has.
    """
    configured = config.context.cache.ttl_seconds
    if configured is not None:
        return configured
    if model_in_code or not _named(config) or is_local_model(config):
        return 0.0
    return HOSTED_CACHE_TTL


def summarizes_with_model(config: ShipConfig, *, model_in_code: bool) -> bool:
    """Whether compaction asks the model for its summary (``chatHistory.summarizer``)."""
    chosen = config.context.chat_history.summarizer
    if chosen != "auto":
        return chosen == "model"
    return _named(config) and not model_in_code and not is_local_model(config)


def chat_histories(
    paths: ShipPaths,
    config: ShipConfig,
    store: ChatStore,
    files: FileStores,
    *,
    model_in_code: bool,
    summary_model: Callable[[], Model],
) -> ChatHistories:
    """An agent's chats, with when and how they compact.

    The marks of ship.json ``context``, the cache TTL and the summarizer above, the model's
    window when ``context.budget.maxTokens`` names it; the message log of this machine's
    ``files`` (``store`` is where the chats live: the same files, or a cluster's database).
    """
    chats = ChatHistories(paths, config.context.chat_history, marks_of(config.context))
    chats.cache_ttl = cache_ttl(config, model_in_code=model_in_code)
    if (budget := config.context.budget).max_tokens is not None:
        chats.window = budget.max_tokens - budget.reserve_output
    chats.log = files.message_log
    chats.store = store
    if summarizes_with_model(config, model_in_code=model_in_code):  # falls back to the extract
        chats.summarizer = model_summarizer(summary_model, config.context.chat_history.summary_max_tokens)
    # a chat hydrated after a crash gets the transcript/log entries its last turns lack
    chats.reconciler = partial(reconcile, files.message_log, files.transcript_log, files.agent_context_log)
    return chats
