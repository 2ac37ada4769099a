"""Engines per backend. SQLite: WAL, busy_timeout, and BEGIN IMMEDIATE for writers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


@dataclass(frozen=True, slots=True)
class Engines:
    """`writer` takes write transactions, `reader` serves reads (the same engine on PostgreSQL)."""

    writer: AsyncEngine
    reader: AsyncEngine

    async def dispose(self) -> None:
        await self.writer.dispose()
        if self.reader is not self.writer:
            await self.reader.dispose()


def create_engines(url: str) -> Engines:
    """Build the engines for a database URL (sqlite+aiosqlite or postgresql+asyncpg)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
        return Engines(writer=engine, reader=engine)
    if parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    # One write connection: writers queue in-process instead of spinning on SQLite's lock.
    writer = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
    reader = create_async_engine(url, pool_size=8, max_overflow=8)
    _configure_sqlite(writer, begin="BEGIN IMMEDIATE")
    _configure_sqlite(reader, begin="BEGIN")
    return Engines(writer=writer, reader=reader)


def _configure_sqlite(engine: AsyncEngine, *, begin: str) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how transactions start (see below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # NORMAL under WAL survives a process crash (kill -9); only power loss may lose the
        # last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(conn: Any) -> None:
        # A deferred transaction that upgrades to a write can fail with "database is locked"
        # regardless of busy_timeout; writers therefore take the lock up front.
        conn.exec_driver_sql(begin)
