"""What a tenant's runs spent (domain/spend.py): per UTC day of their creation, and since.

Tokens are summed in SQL. Costs are summed exactly, never as floats: PostgreSQL sums the
decimal strings as NUMERIC; SQLite, which has no decimal type, hands each group's strings to
Python (group_concat), which sums them as Decimal. Runs are grouped by day and currency, so
a query returns a few rows however many runs it covers; ix_runs_tenant_created serves the
range of created_at. Costs in several currencies do not add up: their total is None.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.spend import DailyUsage, Money, TokenUsage
from behest.errors import InvalidArgument, quote
from behest.store.sql import tables as t

_runs = t.runs.c
ONE_DAY = timedelta(days=1)
# Literals, not bound parameters: PostgreSQL takes a GROUP BY expression for the selected
# one only if it is the same text, and bound parameters are numbered apart ($1, $3).
_UTC = sa.literal_column("'UTC'", sa.String)
_DAY_FORMAT = sa.literal_column("'YYYY-MM-DD'", sa.String)
_ONE, _TEN = sa.literal_column("1", sa.Integer), sa.literal_column("10", sa.Integer)


def daily_usage(
    conn: Connection, *, tenant: str, session_id: str | None, from_day: str, to_day: str
) -> list[DailyUsage]:
    """The tenant's (or one session's) runs created on each UTC day from `from_day` to
    `to_day` (YYYY-MM-DD, both included), summed; days without runs are left out. A day's
    cost is None when none of its runs had one, or when they had costs in several currencies."""
    first, last = _day("from_day", from_day), _day("to_day", to_day)
    if last < first:
        return []
    params = {"b_tenant": tenant, "b_from": _midnight(first), "b_to": _end_of(last)}
    if session_id:
        params["b_session"] = session_id
    query = _daily_query(conn.dialect.name, by_session=bool(session_id))
    totals: dict[str, tuple[int, TokenUsage]] = {}
    costs: dict[str, dict[str, Decimal]] = {}
    for row in conn.execute(query, params):  # one row per day and currency
        runs, usage = totals.get(row.day, (0, TokenUsage()))
        totals[row.day] = (runs + row.runs, usage + _usage(row))
        day_costs = costs.setdefault(row.day, {})
        amount = _amount(row.cost)
        if amount is not None:
            day_costs[row.currency] = amount
    return [
        DailyUsage(day=day, runs=runs, usage=usage, cost=_one_currency(costs[day]))
        for day, (runs, usage) in sorted(totals.items())
    ]


def spent_since(conn: Connection, *, tenant: str, since: datetime) -> tuple[int, Money | None]:
    """Tokens of every kind and cost of the tenant's runs created at or after `since`; the
    cost is None when none had one, or when they had costs in several currencies."""
    tokens, costs = 0, {}
    params = {"b_tenant": tenant, "b_since": since}
    for row in conn.execute(_since_query(conn.dialect.name), params):  # one row per currency
        tokens += int(row.tokens or 0)
        amount = _amount(row.cost)
        if amount is not None:
            costs[row.currency] = amount
    return tokens, _one_currency(costs)


@functools.cache
def _daily_query(dialect: str, *, by_session: bool) -> sa.Select[Any]:
    """Runs in [b_from, b_to) grouped by UTC day and currency; built once per variant."""
    day = _utc_day(dialect)
    query = (
        sa.select(
            day.label("day"),
            _runs.currency,
            sa.func.count().label("runs"),
            sa.func.sum(_runs.input_tokens).label("input"),
            sa.func.sum(_runs.output_tokens).label("output"),
            sa.func.sum(_runs.cached_input_tokens).label("cached"),
            sa.func.sum(_runs.cache_write_tokens).label("cache_write"),
            sa.func.sum(_runs.reasoning_tokens).label("reasoning"),
            _cost_sum(dialect).label("cost"),
        )
        .where(
            _runs.tenant == sa.bindparam("b_tenant"),
            _runs.created_at >= sa.bindparam("b_from"),
            _runs.created_at < sa.bindparam("b_to"),
        )
        .group_by(day, _runs.currency)
    )
    if by_session:
        query = query.where(_runs.session_id == sa.bindparam("b_session"))
    return query


@functools.cache
def _since_query(dialect: str) -> sa.Select[Any]:
    """Runs created at or after b_since grouped by currency; built once per dialect."""
    tokens = (
        _runs.input_tokens
        + _runs.output_tokens
        + _runs.cached_input_tokens
        + _runs.cache_write_tokens
    )
    return (
        sa.select(
            _runs.currency, sa.func.sum(tokens).label("tokens"), _cost_sum(dialect).label("cost")
        )
        .where(
            _runs.tenant == sa.bindparam("b_tenant"), _runs.created_at >= sa.bindparam("b_since")
        )
        .group_by(_runs.currency)
    )


def _utc_day(dialect: str) -> sa.ColumnElement[Any]:
    """YYYY-MM-DD of created_at in UTC."""
    if dialect == "postgresql":
        return sa.func.to_char(sa.func.timezone(_UTC, _runs.created_at), _DAY_FORMAT)
    # SQLite keeps a UtcDateTime as the text 'YYYY-MM-DD HH:MM:SS.ffffff', in UTC.
    return sa.func.substr(_runs.created_at, _ONE, _TEN)


def _cost_sum(dialect: str) -> sa.ColumnElement[Any]:
    """The group's costs: their exact NUMERIC sum, or (SQLite) their strings joined by ','."""
    if dialect == "postgresql":
        return sa.func.sum(sa.cast(_runs.cost, sa.Numeric))
    return sa.func.group_concat(_runs.cost)


def _amount(value: Decimal | str | None) -> Decimal | None:
    """The sum `_cost_sum` gave: NULL when no run of the group had a cost."""
    if value is None or isinstance(value, Decimal):
        return value
    return sum((Decimal(text) for text in value.split(",")), Decimal(0))


def _one_currency(costs: dict[str, Decimal]) -> Money | None:
    """The total of costs in one currency; None for none or several (they do not add up)."""
    if len(costs) != 1:
        return None
    [(currency, amount)] = costs.items()
    return Money(amount, currency)


def _usage(row: Any) -> TokenUsage:
    # SUM of BIGINT is NUMERIC on PostgreSQL (a Decimal here).
    return TokenUsage(
        int(row.input),
        int(row.output),
        int(row.cached),
        int(row.cache_write),
        int(row.reasoning),
    )


def _day(name: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{name} must be a day as YYYY-MM-DD, not {quote(text)}") from None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), UTC)


def _end_of(day: date) -> datetime:
    """The first instant after `day` (UTC), or the last one there is."""
    return _midnight(day + ONE_DAY) if day < date.max else datetime.max.replace(tzinfo=UTC)
