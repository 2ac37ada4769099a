"""Sub-agent runs: the run that started a run, how deep it is, and whether it may start some.

Runs stored before this have no parent, depth 0, and may start no sub-agent runs. A parent's
children are read by ix_runs_parent, which holds only runs that have a parent (nearly every
run has none, so creating one does not touch the index).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

HAS_PARENT = sa.text("parent_run_id IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("parent_run_id", sa.String(36), nullable=True))
        batch.add_column(
            sa.Column("allow_sub_agents", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("depth", sa.Integer, nullable=False, server_default="0"))
    op.create_index(
        "ix_runs_parent",
        "runs",
        ["parent_run_id", "created_at"],
        sqlite_where=HAS_PARENT,
        postgresql_where=HAS_PARENT,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_parent", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        for name in ("depth", "allow_sub_agents", "parent_run_id"):
            batch.drop_column(name)
