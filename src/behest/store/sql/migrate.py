"""The schema brought up to date at start-up (Alembic, migrations/), one replica at a time."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

MIGRATIONS = Path(__file__).parent / "migrations"
# Serialises concurrent migrations of several replicas on PostgreSQL.
MIGRATION_LOCK_KEY = 0x6265_6865_7374


def upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
