"""Double-texting: a rolled-back run's messages leave its session's history.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as messages:
        messages.add_column(
            sa.Column("rolled_back", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("messages") as messages:
        messages.drop_column("rolled_back")
