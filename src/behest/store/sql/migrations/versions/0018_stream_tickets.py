"""Stream tickets: short-lived, single-run credentials for server-sent events, stored by the
SHA-256 of their secret.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "stream_tickets",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("principal", sa.Text, nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("expires_at", Ts, nullable=False),
    )
    op.create_index("ix_stream_tickets_expires", "stream_tickets", ["expires_at"])
    op.create_index("ix_stream_tickets_run", "stream_tickets", ["run_id"])


def downgrade() -> None:
    op.drop_table("stream_tickets")
