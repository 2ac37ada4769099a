"""Engines per backend, and the writer every write transaction goes through.

SQLite: one write connection (WAL, BEGIN IMMEDIATE) on a thread of its own, running a whole
transaction per hop to it (sqlite_writer.py); reads on aiosqlite. PostgreSQL: one asyncpg
engine for both (postgres_writer.py), whose connections are checked for liveness without a
round trip (`_discard_closed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from behest.store.sql.postgres_writer import AsyncWriter
from behest.store.sql.sqlite_writer import (
    DEFAULT_BUSY_TIMEOUT_S,
    ThreadWriter,
    configure_sqlite,
    milliseconds,
)
from behest.store.sql.writer import Writer

# A pooled PostgreSQL connection older than this is replaced at checkout (create_engines):
# under the idle timeouts of NATs and load balancers (Azure's 4 minutes the shortest).
POOL_RECYCLE_S = 200


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
    application_name: str = "",
) -> Engines:
    """Build the engines for a database URL (sqlite+aiosqlite or postgresql+asyncpg).

    `idle_in_transaction_s` (PostgreSQL; 0: the server's setting): a session that sits this
    long inside a transaction is ended by the server. A process frozen mid-write (a stall, a
    SIGSTOP, a partition) would otherwise hold the row locks of its transaction — and with
    them every other replica's claims and renewals of those runs — for as long as it is
    frozen; behest's own transactions never wait between statements on purpose.
    `busy_timeout_s` (SQLite): how long a write waits for another process's lock.
    `application_name` (PostgreSQL): what this node's sessions are named (stalled.py)."""
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
        if application_name:
            settings["application_name"] = application_name
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
    configure_sqlite(reader.sync_engine, begin="BEGIN", busy_ms=milliseconds(busy_timeout_s))
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
