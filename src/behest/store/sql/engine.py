"""Engines per backend, and the writer every write transaction goes through.

SQLite: one write connection (WAL, BEGIN IMMEDIATE) on a thread of its own, running a whole
transaction per hop to it; reads on aiosqlite. PostgreSQL: one asyncpg engine for both,
whose connections are checked for liveness without a round trip (`_discard_closed`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import asyncpg
from sqlalchemy import Connection, Dialect, Engine, Executable, Row, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from behest.backoff import backoff_s
from behest.errors import describe

log = logging.getLogger(__name__)

# SQLite: how long a write waits for another process's write lock (Settings).
DEFAULT_BUSY_TIMEOUT_S = 10.0
# SQLite: the WAL is cut back to this size whenever it is reset after a checkpoint, so that
# a burst (or a long reader holding a snapshot, during which it only grows) leaves no
# lasting file behind.
WAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024
# Tries at switching a new SQLite file to WAL while other connections do (see _enable_wal).
WAL_ATTEMPTS = 20
P = ParamSpec("P")
R = TypeVar("R")
WriteFn = Callable[Concatenate[Connection, P], R]
# A pooled PostgreSQL connection older than this is replaced at checkout (create_engines):
# under the idle timeouts of NATs and load balancers (Azure's 4 minutes the shortest).
POOL_RECYCLE_S = 200
# Runs of a write transaction whose connection is found dead before its COMMIT (AsyncWriter).
LOST_BEFORE_COMMIT_TRIES = 2


class Writer(Protocol):
    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run `fn(connection, …)` in one write transaction; commit if it returns. `fn` may
        be run twice (AsyncWriter: its connection died before COMMIT), so it keeps nothing
        from one run to the next."""
        ...

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`write` for a transaction of a few rows, where a hop to a thread costs the most."""
        ...

    async def execute_once(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> Sequence[Row[Any]]:
        """Run one statement as a transaction of its own, and return its rows."""
        ...

    async def dispose(self) -> None: ...


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
        self._busy_ms = _ms(busy_timeout_s)
        _configure_sqlite(self._engine, begin="BEGIN IMMEDIATE", busy_ms=self._busy_ms)
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


class AsyncWriter:
    """PostgreSQL's writer: the sync write code runs on an asyncpg connection.

    Each statement of a transaction is a round trip, and so are BEGIN and COMMIT.
    `execute_once` runs a statement on an AUTOCOMMIT connection instead, where PostgreSQL
    makes the statement its own transaction: one round trip in all (once the connection has
    prepared its text), e.g. a whole creation built by single_statement.py.

    A transaction whose connection turns out to be dead before its COMMIT was sent (the
    server ended it just before or after checkout: `_discard_closed` cannot see that yet)
    is run once more on a new connection, as pool_pre_ping used to spare it: nothing of it
    can have committed. A connection lost at COMMIT, or during `execute_once`, may have
    committed: that error is raised, for the caller to find out (EventLog._landed).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        # Shares the engine's pool; asyncpg's adapter switches a connection to autocommit
        # and back without a round trip (it only stops sending BEGIN, then sends it again
        # naming the server's default isolation level, which SQLAlchemy read at connect).
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def write(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, LOST_BEFORE_COMMIT_TRIES + 1):
            try:
                async with self._engine.begin() as conn:
                    try:
                        return await conn.run_sync(fn, *args, **kwargs)
                    except DBAPIError as exc:
                        # The COMMIT is sent only when the block ends: not yet.
                        if exc.connection_invalidated and attempt < LOST_BEFORE_COMMIT_TRIES:
                            raise _LostBeforeCommit(exc) from exc
                        raise
            except _LostBeforeCommit as lost:
                log.warning(
                    "a write's connection was lost before COMMIT (%s); trying again on a new one",
                    describe(lost.error.orig or lost.error),  # the driver's words, no SQL
                )
        raise AssertionError("unreachable")

    async def write_small(self, fn: WriteFn[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.write(fn, *args, **kwargs)

    async def execute_once(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> Sequence[Row[Any]]:
        async with self._autocommit.connect() as conn:
            result = await conn.execute(statement, params)
            return result.all() if result.returns_rows else []

    async def execute_on_driver(self, statement: ClauseElement, params: Mapping[str, Any]) -> None:
        """Run one statement as a transaction of its own (AUTOCOMMIT) on the driver itself,
        compiled once per statement: past SQLAlchemy's execution, which costs a run's
        creation (one statement of ~80 array parameters) about a millisecond. Its values must
        be ones asyncpg takes as they are (str, int, bool, aware datetimes, None, lists of
        them): no type processing is applied. A connection found dead is invalidated and
        reported as ConnectionLost — the statement may or may not have committed."""
        sql, names = _driver_sql(statement, self._engine.dialect)
        async with self._autocommit.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.dbapi_connection.driver_connection  # type: ignore[union-attr]
            try:
                await driver.execute(sql, *(params[name] for name in names))
            except Exception as exc:
                # Gone, or left mid-operation by the server's goodbye (asyncpg's protocol
                # then refuses the next operation: InternalClientError).
                if not (isinstance(exc, _CONNECTION_ERRORS) or driver.is_closed()):
                    raise
                await conn.invalidate()
                raise ConnectionLost(describe(exc)) from exc

    async def dispose(self) -> None:
        """The engine's pool is the reader's too; Engines disposes of it."""


class _LockTaken(Exception):
    """Another connection holds SQLite's write lock; nothing was begun."""


def _locked(exc: DBAPIError) -> bool:
    orig = exc.orig
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class ConnectionLost(Exception):
    """A statement's connection died under it: whether it committed is unknown."""


# What asyncpg raises for a connection that is gone (closed, reset, ended by the server).
_CONNECTION_ERRORS = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InternalClientError,
)


@functools.lru_cache(maxsize=64)
def _driver_sql(statement: ClauseElement, dialect: Dialect) -> tuple[str, tuple[str, ...]]:
    """A statement's SQL for asyncpg ($1, $2, …) and its parameters' names in that order."""
    compiled = statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    return compiled.string, tuple(compiled.positiontup or ())


class _LostBeforeCommit(Exception):
    """A write transaction's connection died before its COMMIT: it can be run again."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


def _execute(
    conn: Connection, statement: Executable, params: Mapping[str, Any] | None
) -> Sequence[Row[Any]]:
    result = conn.execute(statement, params)
    return result.all() if result.returns_rows else []


@dataclass(frozen=True, slots=True)
class Engines:
    """`writer` runs write transactions, `reader` serves reads.

    On PostgreSQL the reader is AUTOCOMMIT: each read statement is its own transaction, which
    spares the BEGIN and ROLLBACK round trips around every read. Under READ COMMITTED each
    statement of a transaction takes its own snapshot anyway, so a read of several
    statements sees what it saw before; whatever needs a transaction (locks, FOR UPDATE, a
    server-side cursor) goes through the writer.
    """

    writer: Writer
    reader: AsyncEngine

    async def dispose(self) -> None:
        await self.writer.dispose()
        await self.reader.dispose()


def create_engines(
    url: str,
    *,
    idle_in_transaction_s: float = 0.0,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
) -> Engines:
    """Build the engines for a database URL (sqlite+aiosqlite or postgresql+asyncpg).

    `idle_in_transaction_s` (PostgreSQL; 0: the server's setting): a session that sits this
    long inside a transaction is ended by the server. A process frozen mid-write (a stall, a
    SIGSTOP, a partition) would otherwise hold the row locks of its transaction — and with
    them every other replica's claims and renewals of those runs — for as long as it is
    frozen; behest's own transactions never wait between statements on purpose.
    `busy_timeout_s` (SQLite): how long a write waits for another process's lock."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # No pool_pre_ping: on asyncpg it is BEGIN, SELECT, ROLLBACK, three round trips
        # before every checkout, more than a run's creation costs otherwise. What it caught
        # is caught for free or later: a connection the server closed (a restart, a
        # failover, pg_terminate_backend, idle_session_timeout) is closed on asyncpg's side
        # as soon as the event loop reads its end, and `_discard_closed` replaces it at
        # checkout. One found dead only in use (its end not read yet) is invalidated by
        # SQLAlchemy (is_disconnect, which also renews the rest of the pool); the writer
        # then runs its transaction again (AsyncWriter), and a read fails once, as one
        # would after a successful ping. Connections whose peer vanished silently (a NAT's
        # or load balancer's idle timeout, 4 minutes and up) give no sign, and a ping would
        # hang on them too: pool_recycle replaces connections before they are that old.
        settings = {}
        if idle_in_transaction_s > 0:
            ms = max(1, round(idle_in_transaction_s * 1000))
            settings["idle_in_transaction_session_timeout"] = str(ms)
        engine = create_async_engine(
            url,
            pool_size=10,
            max_overflow=20,
            pool_recycle=POOL_RECYCLE_S,
            connect_args={"server_settings": settings},
        )
        _discard_closed(engine.sync_engine)
        reader = engine.execution_options(isolation_level="AUTOCOMMIT")
        return Engines(writer=AsyncWriter(engine), reader=reader)
    if parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    reader = create_async_engine(url, pool_size=8, max_overflow=8)
    _configure_sqlite(reader.sync_engine, begin="BEGIN", busy_ms=_ms(busy_timeout_s))
    sync_url = parsed.set(drivername="sqlite").render_as_string(hide_password=False)
    return Engines(writer=ThreadWriter(sync_url, busy_timeout_s=busy_timeout_s), reader=reader)


def _discard_closed(engine: Engine) -> None:
    """Replace, at checkout, a pooled asyncpg connection that is already closed."""

    @event.listens_for(engine, "checkout")
    def on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # is_closed() of the asyncpg connection is what the dialect's is_disconnect asks
        # too. The pool then connects anew (and gives up after two tries).
        if dbapi_connection.driver_connection.is_closed():
            raise DisconnectionError("the pooled connection was closed by the server")


def _configure_sqlite(engine: Engine, *, begin: str, busy_ms: int) -> None:
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
