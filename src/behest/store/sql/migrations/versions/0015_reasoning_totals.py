"""Reasoning tokens summed per run: runs.reasoning_tokens and snapshots.reasoning_tokens
(output tokens spent reasoning, part of output_tokens; 0 for runs before this revision).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLES = ("runs", "snapshots")


def upgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as table:
            table.add_column(
                sa.Column("reasoning_tokens", sa.BigInteger, nullable=False, server_default="0")
            )


def downgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as table:
            table.drop_column("reasoning_tokens")
