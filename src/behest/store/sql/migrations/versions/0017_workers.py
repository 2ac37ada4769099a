"""Workers and their tasks: the workers connected to any replica, with the tools they
declared, and the durable tasks of worker tools' calls.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("tools", sa.Text, nullable=False),
        sa.Column("max_tasks", sa.Integer, nullable=False),
        sa.Column("connected_at", Ts, nullable=False),
        sa.Column("seen_at", Ts, nullable=False),
    )
    op.create_index("ix_workers_tenant", "workers", ["tenant", "seen_at"])
    op.create_table(
        "worker_tasks",
        sa.Column("execution_id", sa.String(36), primary_key=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.String(64), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("schedule_deadline", Ts, nullable=False),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("state", sa.SmallInteger, nullable=False),
        sa.Column("worker_id", sa.String(36), nullable=True),
        sa.Column("worker_name", sa.String(200), nullable=False, server_default=""),
        sa.Column("lease_until", Ts, nullable=True),
        sa.Column("deadline", Ts, nullable=True),
        sa.Column("output", sa.Text, nullable=False, server_default=""),
        sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("retryable", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("expired", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_worker_tasks_queue", "worker_tasks", ["tenant", "state", "created_at"])
    op.create_index("ix_worker_tasks_worker", "worker_tasks", ["worker_id"])
    op.create_index("ix_worker_tasks_run", "worker_tasks", ["run_id"])


def downgrade() -> None:
    op.drop_table("worker_tasks")
    op.drop_table("workers")
