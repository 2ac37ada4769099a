"""What runs spend and how they may fail: money, prices, budgets, failure codes.

Money is Decimal, never float: prices are configured as decimal strings per million tokens,
and a model call's cost is exact. Values of the enums match agent.v1's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

MILLION = Decimal(1_000_000)
# The largest amount of money behest takes from a client or the settings (budgets, caps).
MAX_AMOUNT = Decimal(1_000_000_000)


def parse_amount(value: object, *, maximum: Decimal) -> Decimal:
    """Money (or a price) from outside: a decimal string — never a float, which cannot hold
    0.15 exactly — finite, from 0 to `maximum`. ValueError says which rule it broke."""
    if not isinstance(value, str):
        raise ValueError(f'amounts are decimal strings, e.g. "0.50", never numbers; got {value!r}')
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal amount") from None
    if not amount.is_finite() or not 0 <= amount <= maximum:
        raise ValueError(f"{value!r} must be between 0 and {maximum}")
    return amount


class FailureCode(enum.IntEnum):
    """Why a run failed; values match agent.v1.FailureCode."""

    UNSPECIFIED = 0
    PROVIDER_ERROR = 1
    PROVIDER_UNAVAILABLE = 2
    RATE_LIMITED = 3
    AUTHENTICATION = 4
    CONTEXT_OVERFLOW = 5
    MAX_ITERATIONS = 6
    DOOM_LOOP = 7
    BUDGET_EXCEEDED = 8
    TOOL_OUTCOME_UNKNOWN = 9
    ABANDONED = 10
    CONFIGURATION = 11
    INTERNAL = 12
    # The final answer did not fit the run's response format, also after one repair.
    INVALID_OUTPUT = 13
    # A step of the run could not be stored: it never ends COMPLETED without its answer.
    STORAGE = 14


class CancelSource(enum.IntEnum):
    """Who had a run cancelled; values match agent.v1.CancelSource."""

    UNSPECIFIED = 0
    CALLER = 1
    PARENT_RUN = 2
    # A new run of its session interrupted it (double-texting: domain/runs.py BusyPolicy).
    NEW_RUN = 3


class BudgetKind(enum.IntEnum):
    """Which budget ran out; values match agent.v1.BudgetKind."""

    TOKENS = 1
    TOOL_CALLS = 2
    WALL_TIME = 3
    COST = 4
    DAILY_TOKENS = 5
    DAILY_COST = 6


@dataclass(frozen=True, slots=True)
class Money:
    """An exact amount in one currency."""

    amount: Decimal
    currency: str

    def __add__(self, other: Money) -> Money:
        if other.currency != self.currency:
            raise ValueError(f"cannot add {other.currency} to {self.currency}")
        return Money(self.amount + other.amount, self.currency)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """A model's prices per million tokens (from the provider's settings)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None  # default: the input price
    cache_write: Decimal | None = None  # default: the input price
    currency: str = "USD"


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one model call or of a whole run. `input_tokens` are those read neither from
    nor into the provider's prompt cache; cached reads and cache writes are counted apart."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    # Output tokens spent reasoning, as the provider reports them: part of output_tokens.
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cached_input_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def cost(self, prices: Prices) -> Money:
        """What these tokens cost at `prices` (exact)."""
        cached = prices.input if prices.cached_input is None else prices.cached_input
        write = prices.input if prices.cache_write is None else prices.cache_write
        amount = (
            self.input_tokens * prices.input
            + self.output_tokens * prices.output
            + self.cached_input_tokens * cached
            + self.cache_write_tokens * write
        ) / MILLION
        return Money(amount, prices.currency)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBudget:
    """A run's spending limits; 0 or None: none."""

    max_tokens: int = 0
    max_tool_calls: int = 0
    max_wall_seconds: int = 0
    max_cost: Decimal | None = None

    def within(self, other: RunBudget) -> RunBudget:
        """Each limit the tighter of this budget's and `other`'s (unset: the other's)."""

        def least(a: int, b: int) -> int:
            return min(a, b) if a and b else a or b

        costs = [c for c in (self.max_cost, other.max_cost) if c is not None]
        return RunBudget(
            max_tokens=least(self.max_tokens, other.max_tokens),
            max_tool_calls=least(self.max_tool_calls, other.max_tool_calls),
            max_wall_seconds=least(self.max_wall_seconds, other.max_wall_seconds),
            max_cost=min(costs) if costs else None,
        )

    def over(self, defaults: RunBudget) -> RunBudget:
        """This budget with its unset limits taken from `defaults` (a tenant's)."""
        return RunBudget(
            max_tokens=self.max_tokens or defaults.max_tokens,
            max_tool_calls=self.max_tool_calls or defaults.max_tool_calls,
            max_wall_seconds=self.max_wall_seconds or defaults.max_wall_seconds,
            max_cost=self.max_cost if self.max_cost is not None else defaults.max_cost,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DailyUsage:
    """What a tenant's runs created on one UTC day used (`day` as YYYY-MM-DD)."""

    day: str
    runs: int
    usage: TokenUsage
    cost: Money | None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageReport:
    """Days of usage and their sum (a total cost only when the priced days share a currency)."""

    days: list[DailyUsage]
    total: TokenUsage
    cost: Money | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DailyCaps:
    """What all of a tenant's runs of one UTC day may spend together (0 or None: no cap)."""

    max_tokens: int = 0
    max_cost: Decimal | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantSpend:
    """A tenant's spending limits: each run's default budget, and the daily caps over all
    its runs (resolved from the settings by api/tenancy.py, applied by runs/budget.py)."""

    run_budget: RunBudget = field(default_factory=RunBudget)
    daily: DailyCaps = field(default_factory=DailyCaps)
