"""Tool executions: a record of every execution of a tool call and its transitions, and
pending calls that wait for a reconciliation (an outcome unknown: its execution, its verdict).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tool_executions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status", sa.SmallInteger, nullable=False),
        sa.Column("executor", sa.String(250), nullable=False),
        sa.Column("idempotent", sa.Boolean, nullable=False),
        sa.Column("started_at", Ts, nullable=False),
        sa.Column("ended_at", Ts, nullable=True),
        sa.Column("result", sa.Text, nullable=False, server_default=""),
        sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("result_digest", sa.String(80), nullable=False, server_default=""),
        sa.Column("verdict", sa.SmallInteger, nullable=True),
        sa.UniqueConstraint("run_id", "call_id", "attempt", name="uq_tool_executions_attempt"),
    )
    op.create_table(
        "tool_execution_transitions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("execution_id", sa.String(36), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("status", sa.SmallInteger, nullable=False),
        sa.Column("at", Ts, nullable=False),
        sa.Column("actor", sa.String(250), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
    )
    op.create_index(
        "ix_tool_execution_transitions_execution",
        "tool_execution_transitions",
        ["execution_id", "id"],
    )
    op.create_index("ix_tool_execution_transitions_run", "tool_execution_transitions", ["run_id"])
    with op.batch_alter_table("pending_calls") as table:
        table.add_column(sa.Column("execution_id", sa.String(36), nullable=True))
        table.add_column(sa.Column("verdict", sa.SmallInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pending_calls") as table:
        table.drop_column("verdict")
        table.drop_column("execution_id")
    op.drop_table("tool_execution_transitions")
    op.drop_table("tool_executions")
