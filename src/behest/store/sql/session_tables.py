"""Tables of sessions as conversations (SQLAlchemy Core, in tables.py's metadata; migration
0020). Schema changes also need a migration in migrations/."""

from __future__ import annotations

import sqlalchemy as sa

from behest.store.sql.tables import Ts, metadata

# Messages sent to a session while its run was active (on_busy STEER; migration 0020), until
# the run takes them (taken: the step with their user_message_added event).
steers = sa.Table(
    "steers",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("run_id", sa.String(36), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("taken", sa.Boolean, nullable=False),
    sa.Index("ix_steers_run", "run_id", "created_at"),
)
