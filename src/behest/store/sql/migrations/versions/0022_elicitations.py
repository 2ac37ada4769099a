"""Questions running tools ask (elicitations): pending calls of kind 4 hold the question, and
their answers an action.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pending_calls") as pending_calls:
        pending_calls.add_column(sa.Column("question", sa.Text, nullable=True))
        pending_calls.add_column(sa.Column("action", sa.SmallInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pending_calls") as pending_calls:
        pending_calls.drop_column("action")
        pending_calls.drop_column("question")
