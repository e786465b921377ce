"""ship.json's ``context`` section: what a model request carries and what a chat may cost.

Its own module so :mod:`shipagent.config` stays readable; every model here is re-exported there.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ._config_base import ConfigModel as _Model

__all__ = [
    "AgentContextConfig",
    "BudgetConfig",
    "BudgetSectionsConfig",
    "CacheConfig",
    "ChatBudgetsConfig",
    "ChatHistoryConfig",
    "ContextConfig",
    "FilesConfig",
    "InjectionConfig",
    "LedgerConfig",
    "ModelPrice",
    "PinsConfig",
    "SectionCap",
]


class ChatHistoryConfig(_Model):
    """``context.chatHistory``: how a chat's history stays bounded, and what that costs.

    A chat's history grows turn by turn until it passes a **high mark** (``inMemoryMaxMessages``
    messages or ``compactAtTokens`` tokens, whichever comes first); then the older messages are
    folded into one summary and the newest are kept down to the **low mark**
    (``compactKeepLastMessages`` messages and ``compactToTokens`` tokens). Between two compactions
    every turn only appends, so a provider's prompt cache serves everything before the new turn;
    a compaction makes the provider evaluate the summary and the kept messages once. Far-apart
    marks make that rare: with ``t`` tokens per turn, a summary of ``S`` tokens and marks ``H`` and
    ``L`` tokens apart, a compaction costs about ``S + L`` tokens every ``(H - L) / t`` turns.
    """

    in_memory_max_messages: int = Field(default=400, ge=4)
    """The high mark in messages: a commit past it compacts."""
    compact_keep_last_messages: int = Field(default=12, ge=1)
    """The low mark in messages: a compaction keeps at most this many of the newest."""
    compact_at_tokens: int | None = Field(default=None, ge=256)
    """The high mark in tokens (summary + messages). Default: three quarters of the history's
    budget (``context.budget.maxTokens`` less ``reserveOutput``, else ``maxHistoryTokens``)."""
    compact_to_tokens: int | None = Field(default=None, ge=64)
    """The low mark in tokens: a compaction keeps the newest messages up to it. Default: a quarter
    of the high mark."""
    max_history_tokens: int = Field(default=32000, ge=256)
    summary_max_tokens: int = Field(default=400, ge=100)
    """The longest a compaction summary gets; the oldest lines of the extract go first."""
    summarizer: Literal["auto", "extract", "model"] = "auto"
    """Who writes a compaction summary: ``extract`` (mechanical lines), ``model`` (falls back to
    ``extract`` on any failure) or ``auto``: ``model``, except for the embedded ``local`` provider
    and servers on a loopback address, where a small model's summary costs a slow full prompt
    evaluation and is no better than the extract."""
    summary_model: str | None = None
    """The model for ``summarizer: "model"`` (a pydantic-ai model string); default: the agent's."""
    notice: bool = True
    """Whether channels and the web page say so (one line) when a turn compacted the history."""
    idle_evict_seconds: float = Field(default=600, ge=0)
    """A chat unused this long is dropped from memory (rebuilt from disk on its next turn)."""
    max_resident_chats: int = Field(default=1000, ge=1)
    """At most this many chats stay in memory; the least recently used go first."""


class CacheConfig(_Model):
    """``context.cache``: the provider's prompt cache, as compaction plans around it."""

    ttl_seconds: float | None = Field(default=None, ge=0)
    """How long the provider keeps a chat's prompt cached while the chat is idle. A turn that
    starts after a longer pause compacts early, down to the low mark: the cache is cold anyway, so
    the compaction costs nothing extra. ``None``: the provider's (300 s for hosted providers;
    ``0``, never expires, for the embedded ``local`` model and servers on a loopback address)."""


class PinsConfig(_Model):
    """``context.pins``: short facts the user gave, kept in every request and never compacted."""

    enabled: bool = True
    """Whether the ``context_pin`` tool is offered (``agent.pin`` and ``/pin`` work either way)."""
    max_tokens: int = Field(default=500, ge=20)
    """The pinned section's size; a pin that would not fit is refused, naming what to unpin."""


class ModelPrice(_Model):
    """What a model costs, per million tokens, in the currency the budgets use."""

    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)
    cached_input_per_million: float | None = Field(default=None, ge=0)
    """Cached input tokens (default: the input price)."""


class ChatBudgetsConfig(_Model):
    """``context.budgets``: how much one chat may use per day and per month (UTC).

    Tokens are input plus output tokens as the provider reports them. Cost needs the model's
    price: from ``prices`` (by model name) or pydantic-ai's price data; a model with no known
    price is limited by tokens only. A turn over a budget is refused before it starts.
    """

    tokens_per_day: int | None = Field(default=None, ge=1)
    tokens_per_month: int | None = Field(default=None, ge=1)
    cost_per_day: float | None = Field(default=None, gt=0)
    cost_per_month: float | None = Field(default=None, gt=0)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Prices by model name (as the ``llm.model`` names it), over pydantic-ai's own."""


class AgentContextConfig(_Model):
    window_entries: int = Field(default=200, ge=2)


class InjectionConfig(_Model):
    max_injected_messages: int = Field(default=120, ge=0)


class FilesConfig(_Model):
    spill_threshold_bytes: int = Field(default=16384, ge=1024)


SectionCap = Annotated[float, Field(gt=0)]
"""A section cap: tokens (a number > 1) or a fraction of the budget (a number in (0, 1])."""


class BudgetSectionsConfig(_Model):
    """``context.budget.sections``: optional caps, each enforced by its section's own policy."""

    instructions: SectionCap | None = None
    injections: SectionCap | None = None
    history: SectionCap | None = None
    tool_results: SectionCap | None = None


class BudgetConfig(_Model):
    """``context.budget``: what one model request may carry.

    ``maxTokens`` is the whole request: instructions, tool definitions and messages, plus
    ``reserveOutput`` kept free for the answer. Without it, ``chatHistory.maxHistoryTokens`` still
    works as before (the messages alone get that budget).
    """

    max_tokens: int | None = Field(default=None, ge=1024)
    reserve_output: int = Field(default=4000, ge=0)
    """Tokens kept free for the answer; default 4,000, or ``llm.maxTokens`` when that is smaller."""
    sections: BudgetSectionsConfig = Field(default_factory=BudgetSectionsConfig)


class LedgerConfig(_Model):
    """``context.ledger``: the per-request record of what the model was sent."""

    enabled: bool = True
    keep_requests: int = Field(default=1000, ge=10)


class ContextConfig(_Model):
    chat_history: ChatHistoryConfig = Field(default_factory=ChatHistoryConfig)
    agent_context: AgentContextConfig = Field(default_factory=AgentContextConfig)
    injection: InjectionConfig = Field(default_factory=InjectionConfig)
    files: FilesConfig = Field(default_factory=FilesConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    pins: PinsConfig = Field(default_factory=PinsConfig)
    budgets: ChatBudgetsConfig = Field(default_factory=ChatBudgetsConfig)
