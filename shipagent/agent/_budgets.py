"""Budgets per chat (ship.json ``context.budgets``): count what each chat uses, refuse a turn over.

Two halves, both per turn (:meth:`Budgets.turn` makes a :class:`TurnMeter` for each):

- **Counting.** The turn's model is wrapped in a :class:`MeteredModel`, which adds every response's
  tokens (input, cached input, output) and cost to the chat's ``usage.json`` as the response
  arrives, per UTC day and month (:mod:`shipagent.store.usage`). Counting at the model, not at the
  commit, is what makes spent tokens count whatever happens next: a turn that fails after two
  requests, a streamed answer cut by the time limit or by the client leaving, an overflow retry.
  A delegation's sub-agent counts into the chat that delegated (its key without ``#delegate:…``).
- **Refusing.** :meth:`TurnMeter.admit` runs first in the turn, under the chat's lock: a chat at
  or over one of its budgets gets an ``AgentResult(success=False, finish_reason="budget")`` whose
  text names the budget and when it resets, before any model request, so nothing of the turn is
  committed. The turn that crosses a budget completes (its size is not known before it runs);
  the next one is refused.

Cost needs the model's price: ship.json ``prices`` by model name first, else pydantic-ai's price
data for the response (``ModelResponse.cost()``, from genai-prices, in USD); a response with
neither has no cost, and cost budgets then count only what had a price (status says "price
unknown" when nothing had one).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from .._context_config import ChatBudgetsConfig, ModelPrice
from ..results import AgentResult, BudgetRefusal
from ..store.usage import ChatUsage, Spend, UsageBucket, UsageFileError, UsageStore
from ..tools.handover._delegation import DELEGATE_MARK

__all__ = ["Budgets", "ChatUsageReport", "MeteredModel", "PeriodUse", "TurnMeter", "spend_of"]

log = logging.getLogger("shipagent")
Period = Literal["day", "month"]


def budget_key(chat_key: str) -> str:
    """The chat a turn's use counts against: a delegation's is the chat that delegated."""
    return chat_key.split(DELEGATE_MARK, 1)[0]


def spend_of(response: ModelResponse, prices: dict[str, ModelPrice], names: Iterable[str] = ()) -> Spend:
    """What ``response`` used, priced by ``prices`` (under any of ``names`` or the response's model
    name, with or without a ``provider:`` prefix), else by pydantic-ai's price data, else unpriced."""
    usage = response.usage
    cached = min(usage.cache_read_tokens, usage.input_tokens)
    price = _price(prices, [*names, response.model_name or ""])
    cost: float | None
    if price is not None:
        cached_rate = (
            price.input_per_million
            if price.cached_input_per_million is None
            else price.cached_input_per_million
        )
        cost = (
            (usage.input_tokens - cached) * price.input_per_million
            + cached * cached_rate
            + usage.output_tokens * price.output_per_million
        ) / 1e6
    elif usage.cost is not None:  # a provider or gateway that reports the cost itself
        cost = float(usage.cost)
    else:
        cost = _known_price(response)
    return Spend(usage.input_tokens, cached, usage.output_tokens, cost)


def _price(prices: dict[str, ModelPrice], names: Iterable[str]) -> ModelPrice | None:
    for name in names:
        for candidate in (name, name.partition(":")[2]):
            if candidate and candidate in prices:
                return prices[candidate]
    return None


def _known_price(response: ModelResponse) -> float | None:
    """pydantic-ai's (genai-prices') price of ``response``, or ``None`` if it has none."""
    if not response.model_name or response.usage.unmeasured_requests:
        return None
    try:
        return float(response.cost().total_price)
    except (LookupError, ValueError):  # a model or provider genai-prices does not know
        return None
    except Exception as exc:  # pricing never fails a turn: the response counts its tokens only
        log.warning("no price for a response of %r: %s: %s", response.model_name, type(exc).__name__, exc)
        return None


@dataclass(frozen=True, slots=True)
class PeriodUse:
    """One period's use against its budgets (what ``/status`` and ``GET .../usage`` show)."""

    period: Period
    use: UsageBucket
    resets_at: datetime
    token_limit: int | None
    cost_limit: float | None

    @property
    def cost(self) -> float | None:
        """The period's known cost; ``None`` when no response of it had a price."""
        return self.use.cost if self.use.priced else None

    def to_json(self) -> dict[str, Any]:
        def budget(used: float | None, limit: float | None, setting: str) -> dict[str, Any] | None:
            if limit is None:
                return None
            left = None if used is None else max(limit - used, 0)
            return {"setting": setting, "limit": limit, "used": used, "remaining": left}

        name = "Day" if self.period == "day" else "Month"
        return {
            **self.use.to_json(),
            "tokens": self.use.tokens,
            "cost": self.cost,
            "resetsAt": _iso(self.resets_at),
            "budgets": {
                "tokens": budget(self.use.tokens, self.token_limit, f"context.budgets.tokensPer{name}"),
                "cost": budget(self.cost, self.cost_limit, f"context.budgets.costPer{name}"),
            },
        }

    def line(self) -> str:
        """``today: 1,234 of 10,000 tokens, cost 0.0123 of 1``: one line of ``/status``."""
        tokens = f"{self.use.tokens:,}"
        tokens += f" of {self.token_limit:,} tokens" if self.token_limit is not None else " tokens"
        if self.cost is None:
            cost = "price unknown"
        else:
            cost = f"cost {_money(self.cost)}" + (f" of {_money(self.cost_limit)}" if self.cost_limit else "")
            if self.use.unpriced:
                cost += f" ({self.use.unpriced} requests without a price)"
        label = "today" if self.period == "day" else "this month"
        return f"{label}: {tokens}, {cost}; resets {self.resets_at:%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True, slots=True)
class ChatUsageReport:
    """A chat's use against its budgets now: :meth:`ShipAgent.usage`'s answer."""

    chat_key: str
    now: datetime
    day: PeriodUse
    month: PeriodUse
    refused: BudgetRefusal | None
    """What a turn starting now would be refused for (``None``: it would run)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "chatKey": self.chat_key,
            "now": _iso(self.now),
            "day": self.day.to_json(),
            "month": self.month.to_json(),
            "refused": self.refused.to_json() if self.refused is not None else None,
        }

    def lines(self) -> list[str]:
        """What ``/status`` says about the chat's use."""
        lines = [f"Usage {self.day.line()}", f"Usage {self.month.line()}"]
        if self.refused is not None:
            lines.append(
                f"Over budget: {self.refused.setting}; turns run again at {_iso(self.refused.resets_at)}."
            )
        return lines


class Budgets:
    """One agent's budgets: its ship.json ``context.budgets``, the usage files and the clock.

    Args:
        config: ship.json ``context.budgets``.
        store: the chats' ``usage.json`` files.
        now: the current time (aware); tests pass a fixed or moving clock.
        model_names: the names ship.json ``prices`` may list the agent's model under.
        replays: a durable worker may run a turn again after a crash: count each response of a
            request id once, and admit a request id that already spent tokens.
    """

    def __init__(
        self,
        config: ChatBudgetsConfig,
        store: UsageStore,
        *,
        now: Callable[[], datetime],
        model_names: Callable[[], Iterable[str]] = tuple,
        replays: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self.now = now
        self.model_names = model_names
        self.replays = replays

    @property
    def limited(self) -> bool:
        """Whether any budget is set (else a turn is never refused and the file is never read first)."""
        c = self.config
        return any(
            v is not None for v in (c.tokens_per_day, c.tokens_per_month, c.cost_per_day, c.cost_per_month)
        )

    def turn(self) -> TurnMeter:
        """The meter of one turn (armed by its :meth:`TurnMeter.admit`)."""
        return TurnMeter(self)

    async def report(self, chat_key: str) -> ChatUsageReport:
        """The chat's use against its budgets now.

        Raises:
            UsageFileError: the chat's ``usage.json`` is not usage data.
        """
        now = self._utc_now()
        usage = await self.store.aread(budget_key(chat_key))
        day, month = self._periods(usage, now)
        return ChatUsageReport(chat_key, now, day, month, self._over(day, month, now))

    async def refusal(self, chat_key: str, request_id: str | None = None) -> BudgetRefusal | None:
        """Why a turn of ``chat_key`` starting now is refused, or ``None``.

        Raises:
            UsageFileError: the chat's ``usage.json`` is not usage data.
        """
        if not self.limited or DELEGATE_MARK in chat_key:  # a delegation is part of an admitted turn
            return None
        usage = await self.store.aread(budget_key(chat_key))
        if self.replays and request_id is not None and request_id in usage.turns:
            return None  # admitted before a crash: its replay must finish the same way
        now = self._utc_now()
        return self._over(*self._periods(usage, now), now)

    def _utc_now(self) -> datetime:
        now = self.now()
        if now.tzinfo is None:
            raise ValueError("the budgets' clock must give aware datetimes (e.g. datetime.now(UTC))")
        return now.astimezone(UTC)

    def _periods(self, usage: ChatUsage, now: datetime) -> tuple[PeriodUse, PeriodUse]:
        c = self.config
        day = PeriodUse("day", usage.day(_day(now)), _next_day(now), c.tokens_per_day, c.cost_per_day)
        month = PeriodUse(
            "month", usage.month(_month(now)), _next_month(now), c.tokens_per_month, c.cost_per_month
        )
        return day, month

    def _over(self, day: PeriodUse, month: PeriodUse, now: datetime) -> BudgetRefusal | None:
        """The exceeded budget that resets last (the turn waits for it), or ``None``."""
        over: list[BudgetRefusal] = []
        for use in (day, month):
            name = "Day" if use.period == "day" else "Month"
            wait = max(math.ceil((use.resets_at - now).total_seconds()), 1)
            if use.token_limit is not None and use.use.tokens >= use.token_limit:
                over.append(
                    BudgetRefusal(
                        f"context.budgets.tokensPer{name}",
                        "tokens",
                        use.period,
                        use.use.tokens,
                        use.token_limit,
                        use.resets_at,
                        wait,
                    )
                )
            if use.cost_limit is not None and use.cost is not None and use.cost >= use.cost_limit:
                over.append(
                    BudgetRefusal(
                        f"context.budgets.costPer{name}",
                        "cost",
                        use.period,
                        use.cost,
                        use.cost_limit,
                        use.resets_at,
                        wait,
                    )
                )
        return max(over, key=lambda r: r.resets_at) if over else None

    async def record(self, chat_key: str, response: ModelResponse, turn: tuple[str, int] | None) -> None:
        """Add ``response``'s use to the chat's; a failure to write is logged, never the turn's."""
        spend = spend_of(response, self.config.prices, self.model_names())
        now = self._utc_now()
        try:
            await self.store.aadd(budget_key(chat_key), spend, day=_day(now), month=_month(now), turn=turn)
        except (OSError, UsageFileError) as exc:
            log.error("chat %r: could not count a model response's usage: %s", chat_key, exc)


class TurnMeter:
    """One turn's side of the budgets: its admission and the model that counts its responses."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.chat_key: str | None = None
        self.request_id = ""
        self.responses = 0

    async def admit(self, chat_key: str, request_id: str) -> AgentResult | None:
        """``None`` if the turn may run (and from now on its responses count), else the refusal."""
        try:
            refused = await self.budgets.refusal(chat_key, request_id)
        except UsageFileError as exc:  # the budget cannot be checked: say which file, run nothing
            return AgentResult(False, f"The turn did not run: {exc}.", request_id, finish_reason="error")
        if refused is not None:
            log.info("chat %r: turn %s refused: %s is used up", chat_key, request_id, refused.setting)
            return AgentResult(False, refused.message(), request_id, finish_reason="budget", budget=refused)
        self.chat_key, self.request_id = chat_key, request_id
        return None

    def wrap(self, model: Any) -> MeteredModel:
        """``model``, counting each of its responses into the admitted chat's usage."""
        return MeteredModel(model, self)

    async def counted(self, response: ModelResponse) -> None:
        if self.chat_key is None:  # not admitted (a turn built without a meter's admit)
            return
        self.responses += 1
        turn = (self.request_id, self.responses) if self.budgets.replays else None
        with anyio.CancelScope(shield=True):  # spent tokens count even when the turn is being cancelled
            await self.budgets.record(self.chat_key, response, turn)


class MeteredModel(WrapperModel):
    """Wrap a model: every response it gives is counted by ``meter`` as it arrives."""

    def __init__(self, wrapped: Any, meter: TurnMeter) -> None:
        super().__init__(wrapped)
        self.meter = meter

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        await self.meter.counted(response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        async with self.wrapped.request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            try:
                yield stream
            finally:  # whole, cut by the time limit, or abandoned: what streamed was spent
                await self.meter.counted(stream.get())


def _day(now: datetime) -> str:
    return f"{now:%Y-%m-%d}"


def _month(now: datetime) -> str:
    return f"{now:%Y-%m}"


def _next_day(now: datetime) -> datetime:
    return datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)


def _next_month(now: datetime) -> datetime:
    return datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _money(value: float | None) -> str:
    return "?" if value is None else f"{value:,.6f}".rstrip("0").rstrip(".")
