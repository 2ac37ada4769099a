"""Runs that wait: per-run options for waiting, and the tool calls they wait for.

Runs stored before this wait for nothing: no client tools, no approvals, server timeouts.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UNANSWERED = sa.text("answered_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("client_tools", sa.Text, nullable=False, server_default="[]"))
        batch.add_column(
            sa.Column("approval_required_tools", sa.Text, nullable=False, server_default="[]")
        )
        batch.add_column(
            sa.Column("approve_side_effects", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("approval_timeout_s", sa.Integer, nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("client_tool_timeout_s", sa.Integer, nullable=False, server_default="0")
        )
    op.create_table(
        "pending_calls",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("call_id", sa.String(200), primary_key=True),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("kind", sa.SmallInteger, nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decision", sa.SmallInteger, nullable=True),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("answered_by", sa.String(200), nullable=False, server_default=""),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("timed_out", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_pending_calls_session", "pending_calls", ["session_id"])
    op.create_index(
        "ix_pending_calls_waiting",
        "pending_calls",
        ["run_id", "expires_at"],
        sqlite_where=UNANSWERED,
        postgresql_where=UNANSWERED,
    )


def downgrade() -> None:
    op.drop_table("pending_calls")
    with op.batch_alter_table("runs") as batch:
        for column in (
            "client_tool_timeout_s",
            "approval_timeout_s",
            "approve_side_effects",
            "approval_required_tools",
            "client_tools",
        ):
            batch.drop_column(column)
