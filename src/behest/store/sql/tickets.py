"""Stream tickets in SQL (domain/tickets.py): added with the expired ones pruned, looked up by
digest. Every replica of a PostgreSQL database honours a ticket any of them minted."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.tickets import StreamTicket
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc
from behest.store.sql.ticket_tables import stream_tickets

_s = stream_tickets.c
_TICKET = sa.select(stream_tickets).where(_s.digest == sa.bindparam("b_digest"))
_PRUNE = sa.delete(stream_tickets).where(_s.expires_at <= sa.bindparam("b_now"))
_INSERT = sa.insert(stream_tickets)


def add(conn: Connection, ticket: StreamTicket, *, now: datetime) -> None:
    """Store the ticket; delete the tickets that have expired by `now`."""
    conn.execute(_PRUNE, {"b_now": now})
    conn.execute(
        _INSERT,
        {
            "digest": ticket.digest,
            "run_id": ticket.run_id,
            "tenant": ticket.tenant,
            "principal": ticket.principal,
            "created_at": ticket.created_at,
            "expires_at": ticket.expires_at,
        },
    )


class StreamTicketsInSql:
    """The Store's stream ticket methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    async def add_stream_ticket(self, ticket: StreamTicket, *, now: datetime) -> None:
        await self.engines.writer.write_small(add, ticket, now=now)

    async def stream_ticket(self, digest: str) -> StreamTicket | None:
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(_TICKET, {"b_digest": digest})).first()
        if row is None:
            return None
        return StreamTicket(
            digest=row.digest,
            run_id=row.run_id,
            tenant=row.tenant,
            principal=row.principal,
            created_at=utc(row.created_at),
            expires_at=utc(row.expires_at),
        )
