"""Questions of workers' tasks: the questions a running task asks the run's user, stored
against the task, with their answers; a task counts the questions it asked.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("worker_tasks") as worker_tasks:
        worker_tasks.add_column(
            sa.Column("questions", sa.Integer, nullable=False, server_default="0")
        )
    op.create_table(
        "worker_questions",
        sa.Column("execution_id", sa.String(36), primary_key=True),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("requested_schema", sa.Text, nullable=False),
        sa.Column("asked_at", Ts, nullable=False),
        sa.Column("action", sa.SmallInteger, nullable=True),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("error", sa.Text, nullable=False, server_default=""),
        sa.Column("answered_at", Ts, nullable=True),
    )
    op.create_index("ix_worker_questions_run", "worker_questions", ["run_id"])


def downgrade() -> None:
    op.drop_table("worker_questions")
    with op.batch_alter_table("worker_tasks") as worker_tasks:
        worker_tasks.drop_column("questions")
