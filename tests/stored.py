"""The store behind the servers' backs, for the tests and the bench alike: fresh PostgreSQL
databases, and what a run's rows say (its owner, claim generation and status; its stored
events with the generation that wrote each)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from behest.store.sql import tables as t


async def create_database(server_url: str, prefix: str) -> str:
    """A new database named `prefix`_<random> on the server of `server_url`; its URL."""
    server = make_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await _admin(server_url, f'CREATE DATABASE "{name}"')
    return server.set(database=name).render_as_string(hide_password=False)


async def drop_database(server_url: str, url: str) -> None:
    """Drop the database of `url` (made by create_database on the server of `server_url`)."""
    name = make_url(url).database
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def fresh_database(server_url: str, prefix: str) -> AsyncIterator[str]:
    """A new database for one test or bench item (no rows, nodes or schema of another's);
    dropped afterwards."""
    url = await create_database(server_url, prefix)
    try:
        yield url
    finally:
        await drop_database(server_url, url)


async def _admin(url: str, sql: str) -> None:
    """Run `sql` through the database of `url` (asyncpg, outside any transaction)."""
    admin = make_url(url).set(drivername="postgresql")
    connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@asynccontextmanager
async def engine_on(url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


@dataclass(frozen=True)
class RunRow:
    owner: str | None
    generation: int
    status: int


async def run_rows(engine: AsyncEngine, run_ids: Iterable[str]) -> dict[str, RunRow]:
    """The runs' owners (node names), lease generations and statuses, read from the store."""
    r = t.runs.c
    query = sa.select(r.id, r.owner, r.lease_generation, r.status).where(r.id.in_(list(run_ids)))
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return {row.id: RunRow(row.owner, int(row.lease_generation), int(row.status)) for row in rows}


async def stored_events(engine: AsyncEngine, run_id: str) -> list[tuple[int, str, int]]:
    """(sequence, kind, generation) of each stored event of the run, in sequence order."""
    e = t.events.c
    query = (
        sa.select(e.sequence, e.kind, e.generation).where(e.run_id == run_id).order_by(e.sequence)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [(int(row.sequence), str(row.kind), int(row.generation)) for row in rows]
