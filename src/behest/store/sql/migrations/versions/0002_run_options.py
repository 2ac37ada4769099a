"""Per-run options: instructions, allowed tools, max iterations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("instructions", sa.Text, nullable=False, server_default=""))
        batch.add_column(sa.Column("tools", sa.Text, nullable=False, server_default="[]"))
        batch.add_column(
            sa.Column("max_iterations", sa.Integer, nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("max_iterations")
        batch.drop_column("tools")
        batch.drop_column("instructions")
