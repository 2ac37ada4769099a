"""The dashboard: the tenant's runs of the last 24 hours by outcome per hour, the runs active
now, tokens and cost by model — summed from the runs themselves through `Operations` (the
same numbers the behest_* metrics count, per tenant and without a metrics backend)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from behest.domain.callers import Caller
from behest.domain.runs import Run, RunFilter, RunStatus
from behest.domain.spend import TokenUsage
from behest.runs.operations import Operations

HOURS = 24
# Runs read at most (newest first); the page says when the window held more.
MAX_RUNS = 5000
ACTIVE_SHOWN = 100
OUTCOMES = ("COMPLETED", "FAILED", "CANCELLED", "ACTIVE")


@dataclass(slots=True)
class ModelUse:
    model: str
    runs: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: dict[str, Decimal] = field(default_factory=dict)  # by currency

    @property
    def cost_text(self) -> str:
        return ", ".join(f"{a.normalize():f} {c}" for c, a in sorted(self.cost.items())) or "—"


@dataclass(slots=True)
class Dashboard:
    since: datetime
    # hours[i]: counts by outcome of runs created in hour i of the window (0: oldest).
    hours: list[Counter[str]]
    active: list[Run]
    models: list[ModelUse]
    runs_read: int
    truncated: bool
    live_streams: int = 0
    # The tenant's gRPC streams open now (CreateRunStream, WatchRunEvents).
    grpc_streams: int = 0

    @property
    def busiest_hour(self) -> int:
        return max([sum(h.values()) for h in self.hours] + [1])

    @property
    def totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for hour in self.hours:
            total.update(hour)
        return total


async def dashboard(runs: Operations, caller: Caller, *, now: datetime) -> Dashboard:
    since = (now - timedelta(hours=HOURS - 1)).replace(minute=0, second=0, microsecond=0)
    recent, truncated = await _recent(runs, caller, since)
    hours: list[Counter[str]] = [Counter() for _ in range(HOURS)]
    models: dict[str, ModelUse] = {}
    for run in recent:
        slot = int((run.created_at - since).total_seconds() // 3600)
        hours[min(max(slot, 0), HOURS - 1)][outcome(run.status)] += 1
        use = models.setdefault(
            f"{run.provider}/{run.model}", ModelUse(run.provider + "/" + run.model)
        )
        use.runs += 1
        use.usage += run.usage
        if run.cost is not None:
            use.cost[run.cost.currency] = (
                use.cost.get(run.cost.currency, Decimal(0)) + run.cost.amount
            )
    active = await _active(runs, caller)
    ordered = sorted(models.values(), key=lambda m: -m.usage.total_tokens)
    return Dashboard(since, hours, active, ordered, len(recent), truncated)


async def _active(runs: Operations, caller: Caller) -> list[Run]:
    """The tenant's runs not ended (of any age), newest first; up to ACTIVE_SHOWN per status."""
    found: list[Run] = []
    for status in RunStatus:
        if not status.is_terminal:
            found += await runs.list_runs(caller, RunFilter(status=status, limit=ACTIVE_SHOWN))
    return sorted(found, key=lambda r: r.created_at, reverse=True)


def outcome(status: RunStatus) -> str:
    return status.name if status.is_terminal else "ACTIVE"


async def _recent(runs: Operations, caller: Caller, since: datetime) -> tuple[list[Run], bool]:
    """The tenant's runs created since `since`, newest first; whether some were left out."""
    found = await runs.list_runs(caller, RunFilter(limit=MAX_RUNS + 1, created_from=since))
    return found[:MAX_RUNS], len(found) > MAX_RUNS
