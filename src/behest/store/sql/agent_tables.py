"""Tables of agents (domain/agents.py; SQLAlchemy Core, in tables.py's metadata; migration
0019): one row per agent, one per immutable version (its definition as JSON text, and that
text's SHA-256 to tell an unchanged definition), one per alias. Schema changes also need a
migration in migrations/."""

from __future__ import annotations

import sqlalchemy as sa

from behest.store.sql.tables import Ts, metadata

agents = sa.Table(
    "agents",
    metadata,
    sa.Column("tenant", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("latest_version", sa.Integer, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("archived", sa.Boolean, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("updated_at", Ts, nullable=False),
)

agent_versions = sa.Table(
    "agent_versions",
    metadata,
    sa.Column("tenant", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("created_by", sa.Text, nullable=False),
)

agent_aliases = sa.Table(
    "agent_aliases",
    metadata,
    sa.Column("tenant", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("alias", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)
