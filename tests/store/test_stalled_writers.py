"""A vanished node's session stuck in the middle of a statement inside a write transaction
(PostgreSQL): the one idle_in_transaction_session_timeout cannot end, since the backend waits
for the rest of the statement's messages. A live node ends it, and only it: another lapsed
node's idle session and a live node's stuck one are left alone (store/sql/stalled.py).

The stuck session speaks the wire protocol itself (asyncpg always ends its messages with a
Sync): BEGIN, then Parse, Bind and Execute of a row lock without the Sync that would end the
statement, which leaves the backend "active", waiting for its client.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from behest.store.base import NodeRecord
from behest.store.sql import stalled
from behest.store.sql.store import SqlStore
from tests.store.helpers import at, create, new_id, request
from tests.support import CI, NO_POSTGRES, POSTGRES_URL

pytestmark = pytest.mark.skipif(not POSTGRES_URL and not CI, reason=NO_POSTGRES)


class WireSession:
    """A PostgreSQL session on a raw socket (trust authentication), named `application_name`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, url: str, application_name: str) -> WireSession:
        parsed = make_url(url)
        reader, writer = await asyncio.open_connection(parsed.host, parsed.port or 5432)
        params = {
            "user": parsed.username or "postgres",
            "database": parsed.database or "",
            "application_name": application_name,
        }
        body = struct.pack("!i", 196608) + b"".join(
            k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()
        )
        writer.write(struct.pack("!i", len(body) + 4 + 1) + body + b"\0")
        session = cls(reader, writer)
        await session.ready()
        return session

    async def ready(self) -> None:
        """Read messages up to ReadyForQuery; an ErrorResponse fails the test."""
        while True:
            kind = await self._reader.readexactly(1)
            (length,) = struct.unpack("!i", await self._reader.readexactly(4))
            payload = await self._reader.readexactly(length - 4)
            assert kind != b"E", payload
            if kind == b"Z":
                return

    def send(self, kind: bytes, payload: bytes) -> None:
        self._writer.write(kind + struct.pack("!i", len(payload) + 4) + payload)

    async def query(self, sql: str) -> None:
        self.send(b"Q", sql.encode() + b"\0")
        await self.ready()

    async def lock_without_sync(self, run_id: str) -> None:
        """Lock a run's row by a statement left unfinished: no Sync after its Execute."""
        sql = b"SELECT id FROM runs WHERE id = $1 FOR UPDATE"
        self.send(b"P", b"\0" + sql + b"\0" + struct.pack("!h", 0))
        value = run_id.encode()
        bind = b"\0\0" + struct.pack("!h", 0) + struct.pack("!hi", 1, len(value)) + value
        self.send(b"B", bind + struct.pack("!h", 0))
        self.send(b"E", b"\0" + struct.pack("!i", 0))
        self.send(b"H", b"")  # Flush: the backend runs what it has, then waits for more
        await self._writer.drain()

    async def ended(self) -> bytes:
        """All the server sends until it closes the session (10 s at most)."""
        return await asyncio.wait_for(self._reader.read(), 10)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):  # a session the server ended is reset
            await self._writer.wait_closed()


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[SqlStore]:
    store = SqlStore(postgres_url, node=f"live-{new_id()}", lease_s=2.0)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def sessions_of(store: SqlStore, names: list[str]) -> dict[str, str]:
    """application_name → state, of the sessions so named."""
    query = sa.text(
        "SELECT application_name, state FROM pg_stat_activity WHERE application_name = ANY(:names)"
    )
    async with store.engines.reader.connect() as conn:
        return {name: state for name, state in await conn.execute(query, {"names": names})}


async def stuck_session(url: str, name: str, run_id: str) -> WireSession:
    session = await WireSession.open(url, stalled.application_name(name))
    await session.query("BEGIN")
    await session.lock_without_sync(run_id)
    return session


async def test_a_vanished_nodes_session_stuck_in_a_statement_is_ended(
    pg_store: SqlStore, postgres_url: str
) -> None:
    created = await create(pg_store, request())
    run_id = created.id
    gone, live = f"gone-{new_id()}", f"alive-{new_id()}"
    await pg_store.register_node(NodeRecord(gone, "i", "h", 1), now=at(-60), until=at(-30))
    await pg_store.register_node(NodeRecord(live, "i", "h", 2), now=at(), until=at(600))
    other = (await create(pg_store, request())).id
    stuck = await stuck_session(postgres_url, gone, run_id)
    live_stuck = await stuck_session(postgres_url, live, other)
    idle = await WireSession.open(postgres_url, stalled.application_name(f"idle-{new_id()}"))
    await idle.query("BEGIN")
    names = [stalled.application_name(n) for n in (gone, live)]
    try:
        assert set((await sessions_of(pg_store, names)).values()) == {"active"}
        ended = await pg_store.end_stalled_writers(now=at(), before=at(1))
        assert ended == 1

        # The server ends the vanished node's session (and with it its lock): it says so.
        assert b"terminating connection" in await stuck.ended()
        generation = await pg_store.claim_run(run_id, owner="adopter", now=at(), lease_until=at(30))
        assert generation > 0
        # A live node's session, however stuck, is not touched.
        assert (await sessions_of(pg_store, names)).get(stalled.application_name(live)) == "active"
    finally:
        for session in (stuck, live_stuck, idle):
            await session.close()


async def test_a_young_transaction_is_left_alone(pg_store: SqlStore, postgres_url: str) -> None:
    run_id = (await create(pg_store, request())).id
    gone = f"gone-{new_id()}"
    stuck = await stuck_session(postgres_url, gone, run_id)
    try:
        # Begun after `before`: not yet a lease old.
        assert await pg_store.end_stalled_writers(now=at(), before=at(-60)) == 0
        names = [stalled.application_name(gone)]
        assert (await sessions_of(pg_store, names)) == {names[0]: "active"}
    finally:
        await stuck.close()
