"""Double-texting: a rolled-back run's messages leave its session's history; runs enqueued
on a busy session wait for their turn; messages steered into an active run.

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
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
        runs.add_column(sa.Column("queued_after", sa.String(36), nullable=False, server_default=""))
        runs.add_column(
            sa.Column("steers_closed", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.create_index(
        "ix_runs_queued",
        "runs",
        ["session_id", "queued_at"],
        sqlite_where=sa.text("queued_at IS NOT NULL"),
        postgresql_where=sa.text("queued_at IS NOT NULL"),
    )

    op.create_table(
        "steers",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("taken", sa.Boolean, nullable=False),
    )
    op.create_index("ix_steers_run", "steers", ["run_id", "created_at"])


def downgrade() -> None:
    op.drop_table("steers")
    op.drop_index("ix_runs_queued", "runs")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("steers_closed")
        runs.drop_column("queued_after")
        runs.drop_column("queued_at")
    with op.batch_alter_table("messages") as messages:
        messages.drop_column("rolled_back")
