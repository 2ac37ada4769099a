"""SQLite's writer, and the settings of every SQLite connection (WAL, busy timeout).

One write connection (WAL, BEGIN IMMEDIATE) on a thread of its own, running a whole
transaction per hop to it; reads go through aiosqlite (engine.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import Connection, Engine, Executable, Row, create_engine, event
from sqlalchemy.exc import DBAPIError

from behest.backoff import backoff_s
from behest.store.sql.writer import P, R, WriteFn

# SQLite: how long a write waits for another process's write lock (Settings).
DEFAULT_BUSY_TIMEOUT_S = 10.0
# SQLite: the WAL is cut back to this size whenever it is reset after a checkpoint, so that
# a burst (or a long reader holding a snapshot, during which it only grows) leaves no
# lasting file behind.
WAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024
# Tries at switching a new SQLite file to WAL while other connections do (see _enable_wal).
WAL_ATTEMPTS = 20


class ThreadWriter:
    """SQLite's writer: one sync connection, used by one transaction at a time.

    Through aiosqlite every statement, cursor and commit is a round trip between the event
    loop and the driver's thread (a run's creation took ~30 of them); here a whole
    transaction is one, on the writer's own thread. A small one (`write_small`: a run's
    creation when the server is not busy, a lone step) runs on the event loop itself when
    nothing else writes: its ~0.5 ms costs less than the hop and the wait for the GIL on the
    way back. The loop never waits for a lock there: such a transaction takes SQLite's write
    lock without waiting (busy_timeout 0), and when another process holds it (an outside
    writer on the file) the transaction goes to the thread, which waits up to
    `busy_timeout_s`, while health, reads and cancels go on answering. Once started, a
    transaction completes even if its caller is cancelled, as a commit already sent would.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self._engine = create_engine(
            url,
            pool_size=1,
            max_overflow=0,
            connect_args={"check_same_thread": False},
        )
        self._busy_ms = milliseconds(busy_timeout_s)
        configure_sqlite(self._engine, begin="BEGIN IMMEDIATE", busy_ms=self._busy_ms)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        # Transactions handed to the thread and not yet done: while there are any, the one
        # connection is the thread's, and small ones queue behind them instead of the loop
        # waiting for it.
        self._queued = 0

    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        self._queued += 1
        try:
            return await loop.run_in_executor(
                self._thread, lambda: self._transaction(fn, args, kwargs)
            )
        finally:
            self._queued -= 1

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self._queued:
            return await self.write(fn, *args, **kwargs)
        try:
            return self._transaction(fn, args, kwargs, busy_ms=0)
        except _LockTaken:
            return await self.write(fn, *args, **kwargs)

    async def execute_once(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> Sequence[Row[Any]]:
        """A transaction of one statement (on SQLite BEGIN and COMMIT cost no round trip).
        The statements of single_statement.py are PostgreSQL's only: SQLite has no
        data-modifying CTEs."""
        return await self.write(_execute, statement, params)

    def _transaction(
        self, fn: Callable[..., R], args: Any, kwargs: Any, *, busy_ms: int | None = None
    ) -> R:
        """One transaction; with `busy_ms` 0 it raises _LockTaken at once, having written
        nothing, if another connection holds the write lock."""
        with self._engine.connect() as conn:
            # The driver's own connection: a statement through SQLAlchemy would begin.
            raw = conn.connection.dbapi_connection
            assert raw is not None
            if busy_ms is not None:
                raw.execute(f"PRAGMA busy_timeout={busy_ms}")
            try:
                with conn.begin():
                    return fn(conn, *args, **kwargs)
            except DBAPIError as exc:
                if busy_ms == 0 and _locked(exc):
                    raise _LockTaken from None  # rolled back: nothing of it was written
                raise
            finally:
                if busy_ms is not None:
                    raw.execute(f"PRAGMA busy_timeout={self._busy_ms}")

    async def dispose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown()


class _LockTaken(Exception):
    """Another connection holds SQLite's write lock; nothing was begun."""


def _locked(exc: DBAPIError) -> bool:
    orig = exc.orig
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


def milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _execute(
    conn: Connection, statement: Executable, params: Mapping[str, Any] | None
) -> Sequence[Row[Any]]:
    result = conn.execute(statement, params)
    return result.all() if result.returns_rows else []


def configure_sqlite(engine: Engine, *, begin: str, busy_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how transactions start (see below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        _enable_wal(cursor)
        cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
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
            time.sleep(backoff_s(attempt + 1, initial_s=0.01, max_s=0.1))
