"""PostgreSQL's writer: write transactions on asyncpg, one statement on the driver itself,
and connections found dead before or at COMMIT."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
from sqlalchemy import Dialect, Executable, Row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from behest.errors import describe
from behest.store.sql.writer import P, R, WriteFn

log = logging.getLogger(__name__)

# Runs of a write transaction whose connection is found dead before its COMMIT (AsyncWriter).
LOST_BEFORE_COMMIT_TRIES = 2


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
