"""Run ownership (owner node and lease) and the snapshot's last finish reason.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(
            sa.Column("finish_reason", sa.SmallInteger, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("finish_reason")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
