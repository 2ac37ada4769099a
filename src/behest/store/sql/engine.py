"""Engines per backend, and the writer every write transaction goes through.

SQLite: one write connection (WAL, BEGIN IMMEDIATE) on a thread of its own, running a whole
transaction per hop to it; reads on aiosqlite. PostgreSQL: one asyncpg engine for both.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# Tries at switching a new SQLite file to WAL while other connections do (see _enable_wal).
WAL_ATTEMPTS = 20
P = ParamSpec("P")
R = TypeVar("R")
WriteFn = Callable[Concatenate[Connection, P], R]


class Writer(Protocol):
    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run `fn(connection, …)` in one write transaction; commit if it returns."""
        ...

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`write` for a transaction of a few rows, where a hop to a thread costs the most."""
        ...

    async def dispose(self) -> None: ...


class ThreadWriter:
    """SQLite's writer: one sync connection, used by one transaction at a time.

    Through aiosqlite every statement, cursor and commit is a round trip between the event
    loop and the driver's thread (a run's creation took ~30 of them); here a whole
    transaction is one, on the writer's own thread. A small one (`write_small`: a run's
    creation when the server is not busy, a lone step) runs on the event loop itself: its
    ~0.5 ms costs less than the hop and the wait for the GIL on the way back. The price is
    that the loop waits while such a commit does, e.g. when it checkpoints the WAL (a few
    ms), or when another process holds SQLite's write lock (behest expects to be the only
    writer of its file). Once started, a transaction completes even if its caller is
    cancelled, as a commit already sent would.
    """

    def __init__(self, url: str) -> None:
        self._engine = create_engine(
            url,
            pool_size=1,
            max_overflow=0,
            connect_args={"check_same_thread": False},
        )
        _configure_sqlite(self._engine, begin="BEGIN IMMEDIATE")
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")

    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: self._transaction(fn, args, kwargs))

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return self._transaction(fn, args, kwargs)

    def _transaction(self, fn: Callable[..., R], args: Any, kwargs: Any) -> R:
        with self._engine.begin() as conn:
            return fn(conn, *args, **kwargs)

    async def dispose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown()


class AsyncWriter:
    """PostgreSQL's writer: the sync write code runs on an asyncpg connection."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        async with self._engine.begin() as conn:
            return await conn.run_sync(fn, *args, **kwargs)

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.write(fn, *args, **kwargs)

    async def dispose(self) -> None:
        """The engine is the reader's too; Engines disposes of it."""


@dataclass(frozen=True, slots=True)
class Engines:
    """`writer` runs write transactions, `reader` serves reads."""

    writer: Writer
    reader: AsyncEngine

    async def dispose(self) -> None:
        await self.writer.dispose()
        await self.reader.dispose()


def create_engines(url: str) -> Engines:
    """Build the engines for a database URL (sqlite+aiosqlite or postgresql+asyncpg)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
        return Engines(writer=AsyncWriter(engine), reader=engine)
    if parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    reader = create_async_engine(url, pool_size=8, max_overflow=8)
    _configure_sqlite(reader.sync_engine, begin="BEGIN")
    sync_url = parsed.set(drivername="sqlite").render_as_string(hide_password=False)
    return Engines(writer=ThreadWriter(sync_url), reader=reader)


def _configure_sqlite(engine: Engine, *, begin: str) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how transactions start (see below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=10000")
        _enable_wal(cursor)
        # NORMAL under WAL survives a process crash (kill -9); only power loss may lose the
        # last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(conn: Any) -> None:
        # A deferred transaction that upgrades to a write can fail with "database is locked"
        # regardless of busy_timeout; writers therefore take the lock up front.
        conn.exec_driver_sql(begin)


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL (a no-op once it is). Two connections switching a new file at
    once both hold a shared lock and want an exclusive one: SQLite refuses one of them at
    once, without waiting out busy_timeout ("database is locked"). It then tries again."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.005 * (attempt + 1))
