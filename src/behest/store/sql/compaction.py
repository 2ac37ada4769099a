"""A tenant's compaction state: its settings, and the circuit breaker that counts
compactions' outcomes across its runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.store.sql import rows
from behest.store.sql import tables as t
from behest.store.sql.writes import upsert


async def get_config(reader: AsyncEngine, *, tenant: str) -> CompactionConfig:
    """The tenant's compaction settings, or the defaults if it set none."""
    query = sa.select(t.compaction_config).where(t.compaction_config.c.tenant == tenant)
    async with reader.connect() as conn:
        row = (await conn.execute(query)).first()
    if row is None:
        return CompactionConfig()
    values = row._asdict()
    values.pop("tenant")
    return CompactionConfig(**values)


async def get_breaker(reader: AsyncEngine, *, tenant: str) -> CircuitBreakerState:
    query = sa.select(t.circuit_breaker).where(t.circuit_breaker.c.tenant == tenant)
    async with reader.connect() as conn:
        row = (await conn.execute(query)).first()
    if row is None:
        return CircuitBreakerState()
    opened = rows.utc(row.opened_at) if row.opened_at else None
    return CircuitBreakerState(consecutive_failures=row.consecutive_failures, opened_at=opened)


def config_fields() -> list[str]:
    return [c.name for c in t.compaction_config.columns if c.name != "tenant"]


def put_config(conn: Connection, row: dict[str, Any]) -> None:
    conn.execute(upsert(conn.dialect.name, t.compaction_config, "tenant"), row)
    # A new configuration deserves a fresh chance: it closes the tenant's breaker.
    breaker = {"tenant": row["tenant"], "consecutive_failures": 0, "opened_at": None}
    conn.execute(upsert(conn.dialect.name, t.circuit_breaker, "tenant"), breaker)


def record(
    conn: Connection, *, tenant: str, succeeded: bool, threshold: int, now: datetime
) -> CircuitBreakerState:
    breaker = t.circuit_breaker
    query = sa.select(breaker).where(breaker.c.tenant == tenant)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).first()
    failures = 0 if succeeded else (row.consecutive_failures if row else 0) + 1
    # Each failure at or past the threshold (re)opens it: also one after a cool-down.
    opened_at = now if failures >= threshold else None
    values = {"tenant": tenant, "consecutive_failures": failures, "opened_at": opened_at}
    conn.execute(upsert(conn.dialect.name, breaker, "tenant"), values)
    return CircuitBreakerState(consecutive_failures=failures, opened_at=opened_at)
