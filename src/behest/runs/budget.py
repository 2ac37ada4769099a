"""A run's budgets: tokens, tool calls, wall-clock time and cost, and its tenant's daily caps.

Checked before every model call (each attempt: retries count) and after every usage report;
a running tool's request for a model call (runs/sampling.py) asks `allowance`, which refuses
it once a budget is spent without stopping the run (its next model call does).
Before a call the model's output is clamped to what the token and cost budgets have left, so
a run overshoots a token or cost budget by at most one model call (its input). Running out
emits BudgetExceeded (which budget, the limit, what was used) and stops the run: RunFailed
with FAILURE_CODE_BUDGET_EXCEEDED. Wall-clock time counts from the run's creation, waits
for input included.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, time
from decimal import Decimal

from behest.domain import events as ev
from behest.domain.runs import Run
from behest.domain.spend import (
    MILLION,
    BudgetKind,
    DailyCaps,
    FailureCode,
    Prices,
    RunBudget,
    TenantSpend,
)
from behest.errors import RunStopped
from behest.events.run_log import RunLog
from behest.runs.progress import RunProgress
from behest.store.base import Store

_WORDS = {
    BudgetKind.TOKENS: "its token budget",
    BudgetKind.TOOL_CALLS: "its tool-call budget",
    BudgetKind.WALL_TIME: "its wall-clock budget (seconds)",
    BudgetKind.COST: "its cost budget",
    BudgetKind.DAILY_TOKENS: "the tenant's daily token cap",
    BudgetKind.DAILY_COST: "the tenant's daily cost cap",
}


class Budget:
    """One run's budgets, over what its progress says it has spent."""

    @classmethod
    def of_run(
        cls,
        run: Run,
        tenant: TenantSpend,
        prices: Prices | None,
        progress: RunProgress,
        log: RunLog,
        store: Store,
    ) -> Budget:
        """The run's budget over its tenant's defaults, and the tenant's daily caps."""
        budget = run.budget.over(tenant.run_budget)
        return cls(
            run=run,
            budget=budget,
            daily=tenant.daily,
            prices=prices,
            progress=progress,
            log=log,
            store=store,
        )

    def __init__(
        self,
        *,
        run: Run,
        budget: RunBudget,
        daily: DailyCaps,
        prices: Prices | None,
        progress: RunProgress,
        log: RunLog,
        store: Store,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._run = run
        # A cost budget needs prices: without them it cannot be kept (creation refuses it
        # for the run; a tenant's default cost budget is left out).
        self._budget = budget if prices is not None else _without_cost(budget)
        self._daily = daily if prices is not None else DailyCaps(max_tokens=daily.max_tokens)
        self._prices = prices
        self._progress = progress
        self._log = log
        self._store = store
        self._clock = clock

    async def before_call(self, max_output_tokens: int) -> int:
        """Stop the run if a budget is spent; else the output tokens the call may produce."""
        await self._stop_if(self._over(strictly=False) or self._wall_time())
        await self._stop_if(await self._daily_over())
        return self._clamped(max_output_tokens)

    async def allowance(self, max_output_tokens: int) -> int | str:
        """For a model call a running tool asks for (runs/sampling.py): the output tokens it
        may produce, or why it may not be made (a budget is spent), without stopping the
        run: the run's own next check does that."""
        over = self._over(strictly=False) or self._wall_time() or await self._daily_over()
        if over is not None:
            kind, limit, used = over
            return f"the run's budget is spent: it used {used} against {_WORDS[kind]} of {limit}"
        return self._clamped(max_output_tokens)

    def _clamped(self, max_output_tokens: int) -> int:
        """`max_output_tokens`, within what the token and cost budgets have left."""
        allowed = max_output_tokens
        budget = self._budget
        if budget.max_tokens:
            allowed = min(allowed, budget.max_tokens - self._tokens())
        if budget.max_cost is not None and self._prices is not None and self._prices.output > 0:
            left = budget.max_cost - self._spent_cost()
            allowed = min(allowed, int(left * MILLION / self._prices.output))
        return max(1, allowed)

    def left(self) -> RunBudget:
        """What the token, tool-call and cost budgets have left (a child run's budget)."""
        budget, progress = self._budget, self._progress
        tokens = budget.max_tokens and max(1, budget.max_tokens - self._tokens())
        calls = budget.max_tool_calls and max(1, budget.max_tool_calls - progress.tool_calls)
        cost = None
        if budget.max_cost is not None:
            cost = max(Decimal(0), budget.max_cost - self._spent_cost())
        return RunBudget(max_tokens=tokens, max_tool_calls=calls, max_cost=cost)

    async def after_usage(self) -> None:
        """Stop the run if its last model call took it over a token or cost budget."""
        await self._stop_if(self._over(strictly=True))

    async def before_tools(self) -> None:
        """Stop the run if the calls of its last turn broke its tool-call budget (none of
        them runs), or its time is up."""
        limit = self._budget.max_tool_calls
        used = self._progress.tool_calls
        if limit and used > limit:
            await self._stop(BudgetKind.TOOL_CALLS, str(limit), str(used))
        await self._stop_if(self._wall_time())

    def _over(self, *, strictly: bool) -> tuple[BudgetKind, str, str] | None:
        """A token or cost budget that is spent (`strictly`: gone past, not just reached)."""
        budget = self._budget
        tokens = self._tokens()
        if budget.max_tokens and _past(tokens, budget.max_tokens, strictly):
            return BudgetKind.TOKENS, str(budget.max_tokens), str(tokens)
        cost = self._spent_cost()
        if budget.max_cost is not None and _past(cost, budget.max_cost, strictly):
            return BudgetKind.COST, str(budget.max_cost), str(cost)
        return None

    def _wall_time(self) -> tuple[BudgetKind, str, str] | None:
        limit = self._budget.max_wall_seconds
        if not limit:
            return None
        elapsed = (self._clock() - self._run.created_at).total_seconds()
        if elapsed < limit:
            return None
        return BudgetKind.WALL_TIME, str(limit), str(int(elapsed))

    async def _daily_over(self) -> tuple[BudgetKind, str, str] | None:
        """A daily cap of the run's tenant that is spent."""
        daily = self._daily
        if not daily.max_tokens and daily.max_cost is None:
            return None
        midnight = datetime.combine(self._clock().date(), time(), tzinfo=UTC)
        tokens, cost = await self._store.spent_since(tenant=self._run.tenant, since=midnight)
        if daily.max_tokens and tokens >= daily.max_tokens:
            return BudgetKind.DAILY_TOKENS, str(daily.max_tokens), str(tokens)
        spent = Decimal(0) if cost is None else cost.amount
        if daily.max_cost is not None and spent >= daily.max_cost:
            return BudgetKind.DAILY_COST, str(daily.max_cost), str(spent)
        return None

    def _tokens(self) -> int:
        """Tokens the run spent, its sub-agent runs' included."""
        return self._progress.usage.total_tokens + self._progress.children_tokens

    def _spent_cost(self) -> Decimal:
        """What the run cost, its sub-agent runs included."""
        cost = self._progress.cost
        own = Decimal(0) if cost is None else cost.amount
        return own + self._progress.children_cost

    async def _stop_if(self, over: tuple[BudgetKind, str, str] | None) -> None:
        if over is not None:
            await self._stop(*over)

    async def _stop(self, kind: BudgetKind, limit: str, used: str) -> None:
        """Record which budget ran out, then stop the run."""
        await self._log.emit(ev.BudgetExceeded(kind, limit, used))
        raise RunStopped(
            f"budget exceeded: the run used {used} against {_WORDS[kind]} of {limit}",
            FailureCode.BUDGET_EXCEEDED,
        )


def _past(used: int | Decimal, limit: int | Decimal, strictly: bool) -> bool:
    return used > limit if strictly else used >= limit


def _without_cost(budget: RunBudget) -> RunBudget:
    return RunBudget(
        max_tokens=budget.max_tokens,
        max_tool_calls=budget.max_tool_calls,
        max_wall_seconds=budget.max_wall_seconds,
    )
