"""Spend as stored: budgets, costs, cache tokens, failure codes; usage per day and since."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from behest.domain.runs import Run, RunFilter, RunRequest, RunStatus
from behest.domain.spend import DailyUsage, FailureCode, Money, RunBudget, TokenUsage
from behest.errors import InvalidArgument
from behest.store.sql.store import SqlStore
from behest.store.writes import PutSnapshot, UpdateRun
from tests.store.helpers import TENANT, at, create, new_id, snapshot
from tests.support import sqlite_at_revision

BUDGET = RunBudget(
    max_tokens=5_000_000_000, max_tool_calls=12, max_wall_seconds=3600, max_cost=Decimal("1.50")
)
DAY1, DAY2 = "2031-05-06", "2031-05-07"
PLUS_2 = timezone(timedelta(hours=2))


# What a run uses unless a test says otherwise: some of each kind of token.
USAGE = TokenUsage(1, 2, 3, 4)


def req(session_id: str | None = None, **options: Any) -> RunRequest:
    return RunRequest(session_id=session_id, provider="local", model="echo", input="hi", **options)


def usd(amount: str) -> Money:
    return Money(Decimal(amount), "USD")


def spend_update(
    run: Run,
    *,
    usage: TokenUsage,
    cost: Money | None,
    status: RunStatus = RunStatus.COMPLETED,
    failure_code: FailureCode = FailureCode.UNSPECIFIED,
) -> UpdateRun:
    return UpdateRun(
        run_id=run.id,
        status=status,
        iterations=2,
        usage=usage,
        failure_code=failure_code,
        cost=cost,
    )


async def spent_run(
    store: SqlStore,
    created_at: datetime,
    *,
    usage: TokenUsage = USAGE,
    cost: Money | None = None,
    tenant: str,
    session_id: str | None = None,
) -> Run:
    """A run created at `created_at` that ended having used `usage` and cost `cost`."""
    run = await create(store, req(session_id), tenant=tenant, now=created_at)
    await store.apply([spend_update(run, usage=usage, cost=cost)])
    return run


# --- runs and snapshots read back with what they spent -------------------------------------


async def test_a_run_reads_back_with_its_budget(store: SqlStore) -> None:
    run = await create(store, req(budget=BUDGET))  # also checks the outcome is the run as stored

    assert run.budget == BUDGET
    assert type(run.budget.max_cost) is Decimal
    assert (run.cost, run.failure_code) == (None, FailureCode.UNSPECIFIED)
    assert run.usage == TokenUsage()


async def test_a_budget_of_zero_cost_is_not_no_budget(store: SqlStore) -> None:
    first = await create(store, req())
    await store.apply([spend_update(first, usage=TokenUsage(), cost=None)])
    # Through the checked path too: an existing session and a client_request_id.
    zero = RunBudget(max_cost=Decimal("0"))
    run = await create(store, req(first.session_id, client_request_id=new_id(), budget=zero))

    assert run.budget == zero and run.budget.max_cost is not None
    assert first.budget == RunBudget()
    listed = await store.list_runs(
        tenant=TENANT, wanted=RunFilter(session_id=first.session_id, limit=10)
    )
    assert [r.budget for r in listed] == [zero, RunBudget()]


async def test_update_run_stores_cost_cache_tokens_and_failure_code_exactly(
    store: SqlStore,
) -> None:
    run = await create(store)
    usage = TokenUsage(1, 2, 3_000_000_000, 4_000_000_000)

    await store.apply(
        [
            spend_update(
                run,
                usage=usage,
                cost=usd("0.000123"),
                status=RunStatus.FAILED,
                failure_code=FailureCode.BUDGET_EXCEEDED,
            )
        ]
    )

    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.usage == usage
    assert stored.cost == usd("0.000123")
    assert str(stored.cost.amount) == "0.000123"  # the very decimal, not a float's digits
    assert stored.failure_code is FailureCode.BUDGET_EXCEEDED


async def test_an_update_without_cost_clears_it(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(
        [spend_update(run, usage=TokenUsage(1, 1), cost=usd("2.5"), status=RunStatus.CALLING_MODEL)]
    )

    await store.apply([spend_update(run, usage=TokenUsage(2, 2), cost=None)])

    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.cost, stored.usage, stored.status) == (
        None,
        TokenUsage(2, 2),
        RunStatus.COMPLETED,
    )


async def test_a_snapshot_reads_back_with_tool_calls_cost_and_cache_tokens(
    store: SqlStore,
) -> None:
    costly, free = await create(store), await create(store)
    saved = replace(
        snapshot(costly),
        usage=TokenUsage(10, 20, 3_000_000_000, 40),
        tool_calls=7,
        cost=Money(Decimal("12.3456789012345678901234567890"), "EUR"),
    )
    plain = snapshot(free)

    await store.apply([PutSnapshot(saved), PutSnapshot(plain)])

    assert await store.get_snapshot(costly.id) == saved
    assert await store.get_snapshot(free.id) == plain
    assert (plain.tool_calls, plain.cost) == (0, None)


# --- usage per day --------------------------------------------------------------------------


async def test_daily_usage_sums_each_utc_day_exactly_per_tenant_and_session(
    store: SqlStore,
) -> None:
    tenant, other = new_id(), new_id()
    tokens = TokenUsage(1_000_000_000, 2, 3, 4)
    a1 = await spent_run(store, _at(DAY1, 10), usage=tokens, cost=usd("0.1"), tenant=tenant)
    session_a = a1.session_id
    # 01:30 at +02:00 is 23:30 UTC: still the first day.
    late = datetime(2031, 5, 7, 1, 30, tzinfo=PLUS_2)
    await spent_run(store, late, usage=tokens, cost=usd("0.1"), tenant=tenant, session_id=session_a)
    await spent_run(
        store, _at(DAY2, 0), usage=tokens, cost=usd("0.1"), tenant=tenant, session_id=session_a
    )
    b1 = await spent_run(store, _at(DAY1, 12), usage=tokens, cost=usd("0.1"), tenant=tenant)
    await spent_run(store, _at(DAY2, 8), tenant=tenant, session_id=b1.session_id)
    # Just outside the range on either side, and another tenant's run of the same day.
    await spent_run(store, _at(DAY1, 0) - timedelta(microseconds=1), cost=usd("5"), tenant=tenant)
    await spent_run(store, _at(DAY2, 24), cost=usd("5"), tenant=tenant)
    await spent_run(store, _at(DAY1, 11), usage=tokens, cost=usd("100"), tenant=other)

    days = await store.daily_usage(tenant=tenant, session_id=None, from_day=DAY1, to_day=DAY2)

    assert days == [
        DailyUsage(day=DAY1, runs=3, usage=_times(tokens, 3), cost=usd("0.3")),
        DailyUsage(day=DAY2, runs=2, usage=tokens + USAGE, cost=usd("0.1")),
    ]
    by_a = await store.daily_usage(tenant=tenant, session_id=session_a, from_day=DAY1, to_day=DAY2)
    assert by_a == [
        DailyUsage(day=DAY1, runs=2, usage=_times(tokens, 2), cost=usd("0.2")),
        DailyUsage(day=DAY2, runs=1, usage=tokens, cost=usd("0.1")),
    ]
    # A day whose runs had no cost has none; a range of one day, and one of a day with no runs.
    by_b = await store.daily_usage(
        tenant=tenant, session_id=b1.session_id, from_day=DAY2, to_day=DAY2
    )
    assert by_b == [DailyUsage(day=DAY2, runs=1, usage=USAGE, cost=None)]
    wide = await store.daily_usage(
        tenant=tenant, session_id=None, from_day="2031-05-01", to_day="2031-05-31"
    )
    assert [(d.day, d.runs, d.cost) for d in wide] == [
        ("2031-05-05", 1, usd("5")),
        (DAY1, 3, usd("0.3")),
        (DAY2, 2, usd("0.1")),
        ("2031-05-08", 1, usd("5")),
    ]


async def test_daily_cost_in_several_currencies_is_none_but_tokens_still_count(
    store: SqlStore,
) -> None:
    tenant = new_id()
    await spent_run(store, _at(DAY1, 1), cost=usd("1"), tenant=tenant)
    await spent_run(store, _at(DAY1, 2), cost=Money(Decimal("1"), "EUR"), tenant=tenant)
    await spent_run(store, _at(DAY1, 3), cost=None, tenant=tenant)
    await spent_run(store, _at(DAY2, 3), cost=Money(Decimal("2"), "EUR"), tenant=tenant)

    days = await store.daily_usage(tenant=tenant, session_id=None, from_day=DAY1, to_day=DAY2)

    assert days == [
        DailyUsage(day=DAY1, runs=3, usage=_times(USAGE, 3), cost=None),
        DailyUsage(day=DAY2, runs=1, usage=USAGE, cost=Money(Decimal(2), "EUR")),
    ]


async def test_daily_cost_of_many_small_amounts_is_exact(store: SqlStore) -> None:
    tenant = new_id()
    for hour in range(10):
        await spent_run(store, _at(DAY1, hour), cost=usd("0.000000001"), tenant=tenant)

    [day] = await store.daily_usage(tenant=tenant, session_id=None, from_day=DAY1, to_day=DAY1)

    assert day.cost == usd("0.00000001")


async def test_daily_usage_of_an_empty_or_reversed_range_is_empty(store: SqlStore) -> None:
    tenant = new_id()
    await spent_run(store, _at(DAY1, 5), cost=usd("1"), tenant=tenant)

    reversed_ = await store.daily_usage(tenant=tenant, session_id=None, from_day=DAY2, to_day=DAY1)
    elsewhere = await store.daily_usage(
        tenant=new_id(), session_id=None, from_day=DAY1, to_day=DAY1
    )
    open_ended = await store.daily_usage(
        tenant=tenant, session_id=None, from_day="0001-01-01", to_day="9999-12-31"
    )

    assert (reversed_, elsewhere) == ([], [])
    assert [d.day for d in open_ended] == [DAY1]


async def test_daily_usage_refuses_a_day_that_is_not_one(store: SqlStore) -> None:
    with pytest.raises(InvalidArgument, match="to_day"):
        await store.daily_usage(tenant=TENANT, session_id=None, from_day=DAY1, to_day="May 7")


# --- spent since -------------------------------------------------------------------------------


async def test_spent_since_counts_the_tenants_runs_from_that_instant(store: SqlStore) -> None:
    tenant = new_id()
    since = at(-60)
    await spent_run(store, since - timedelta(microseconds=1), cost=usd("100"), tenant=tenant)
    await spent_run(store, since, usage=USAGE, cost=usd("0.1"), tenant=tenant)
    later = TokenUsage(3_000_000_000, 20, 30, 40)
    await spent_run(store, since + timedelta(seconds=1), usage=later, cost=None, tenant=tenant)
    await spent_run(store, since + timedelta(seconds=2), cost=usd("0.2"), tenant=tenant)
    await spent_run(store, since, cost=usd("100"), tenant=new_id())

    tokens, cost = await store.spent_since(tenant=tenant, since=since)

    assert tokens == 10 + later.total_tokens + 10
    assert cost == usd("0.3")


async def test_spent_since_without_runs_or_costs(store: SqlStore) -> None:
    tenant = new_id()
    assert await store.spent_since(tenant=tenant, since=at(-60)) == (0, None)

    await spent_run(store, at(-10), cost=None, tenant=tenant)
    assert await store.spent_since(tenant=tenant, since=at(-60)) == (10, None)

    await spent_run(store, at(-5), cost=Money(Decimal("1"), "EUR"), tenant=tenant)
    await spent_run(store, at(-5), cost=usd("1"), tenant=tenant)
    assert await store.spent_since(tenant=tenant, since=at(-60)) == (30, None)


# --- migration 0008 -------------------------------------------------------------------------


async def test_runs_and_snapshots_stored_before_0008_spent_nothing(tmp_path: Path) -> None:
    path = tmp_path / "behest.db"
    sqlite_at_revision(path, "0007")
    with sqlite3.connect(path) as db:  # what a 0.6 server left behind
        db.execute(
            "INSERT INTO sessions (id, created_at, updated_at, active_run_id, tenant)"
            f" VALUES ('s1', '{DAY1} 10:00:00.000000', '{DAY1} 10:00:00.000000', NULL, 't')"
        )
        db.execute(
            "INSERT INTO runs (id, session_id, status, provider, model, input, metadata,"
            " tool_choice, created_at, updated_at, iterations, finish_reason, input_tokens,"
            " output_tokens, error, traceparent, tenant) VALUES ('r1', 's1', 7, 'local', 'echo',"
            f" 'hi', '', 'auto', '{DAY1} 10:00:00.000000', '{DAY1} 10:00:00.000000', 1, 1, 3, 4,"
            " '', '', 't')"
        )
        db.execute(
            "INSERT INTO snapshots (run_id, session_id, status, iteration, input_tokens,"
            " output_tokens, model_calls, pending_tool_calls, updated_at, finish_reason)"
            f" VALUES ('r1', 's1', 3, 1, 3, 4, 1, '[]', '{DAY1} 10:00:00.000000', 0)"
        )
    store = SqlStore(f"sqlite+aiosqlite:///{path}")
    await store.start()  # migrates to head
    try:
        run = await store.get_run("r1")
        saved = await store.get_snapshot("r1")
        days = await store.daily_usage(tenant="t", session_id=None, from_day=DAY1, to_day=DAY1)
    finally:
        await store.close()
    assert run is not None and saved is not None
    assert (run.usage, run.cost, run.budget) == (TokenUsage(3, 4), None, RunBudget())
    assert run.failure_code is FailureCode.UNSPECIFIED
    assert (saved.usage, saved.tool_calls, saved.cost) == (TokenUsage(3, 4), 0, None)
    assert days == [DailyUsage(day=DAY1, runs=1, usage=TokenUsage(3, 4), cost=None)]


def _at(day: str, hours: int) -> datetime:
    """`hours` after the day's midnight, UTC."""
    return datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(hours=hours)


def _times(usage: TokenUsage, n: int) -> TokenUsage:
    total = TokenUsage()
    for _ in range(n):
        total += usage
    return total
