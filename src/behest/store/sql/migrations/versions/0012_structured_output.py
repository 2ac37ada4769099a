"""Structured output: a run's response format and the answer that fitted it.

- runs.response_format_name, runs.response_format_schema: the format the run's final answer
  must fit ('' and '': none); the schema as compact JSON text.
- runs.output: that answer, parsed and stored as compact JSON text (NULL: none).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column("response_format_name", sa.String(64), nullable=False, server_default="")
        )
        runs.add_column(
            sa.Column("response_format_schema", sa.Text, nullable=False, server_default="")
        )
        runs.add_column(sa.Column("output", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        for column in ("output", "response_format_schema", "response_format_name"):
            runs.drop_column(column)
