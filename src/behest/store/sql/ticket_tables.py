"""The table of stream tickets (SQLAlchemy Core, in tables.py's metadata); schema changes also
need a migration in migrations/."""

from __future__ import annotations

import sqlalchemy as sa

from behest.store.sql.tables import Ts, metadata

# Stream tickets (domain/tickets.py; migration 0018): the SHA-256 of each secret, never the
# secret; expired rows are pruned as new tickets are minted, and go with their run.
stream_tickets = sa.Table(
    "stream_tickets",
    metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(36), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("principal", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
    sa.Index("ix_stream_tickets_expires", "expires_at"),
    sa.Index("ix_stream_tickets_run", "run_id"),
)
