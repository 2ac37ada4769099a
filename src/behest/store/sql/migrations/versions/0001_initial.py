"""Initial schema: sessions, runs, events, messages, snapshots, idempotency keys, compaction.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("active_run_id", sa.String(36), nullable=True),
    )
    op.create_index("ix_sessions_active_run", "sessions", ["active_run_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("session_id", sa.String(36), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("status", sa.SmallInteger, nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("tool_choice", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("finish_reason", sa.SmallInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("traceparent", sa.String(64), nullable=False),
    )
    op.create_index("ix_runs_session_created", "runs", ["session_id", "created_at"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "events",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("sequence", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("tool_calls", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("is_error", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("session_id", "position", name="uq_messages_session_position"),
    )
    op.create_index("ix_messages_run", "messages", ["run_id"])
    op.create_table(
        "snapshots",
        sa.Column("run_id", sa.String(36), primary_key=True),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("status", sa.SmallInteger, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("model_calls", sa.Integer, nullable=False),
        sa.Column("pending_tool_calls", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("identity", sa.String(200), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "compaction_config",
        sa.Column("id", sa.SmallInteger, primary_key=True),
        sa.Column("auto", sa.Boolean, nullable=False),
        sa.Column("prune", sa.Boolean, nullable=False),
        sa.Column("buffer_tokens", sa.BigInteger, nullable=False),
        sa.Column("keep_tokens", sa.BigInteger, nullable=False),
        sa.Column("tail_turns", sa.Integer, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("circuit_breaker_threshold", sa.Integer, nullable=False),
    )
    op.create_table(
        "circuit_breaker",
        sa.Column("id", sa.SmallInteger, primary_key=True),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("opened_at", TS, nullable=True),
    )


def downgrade() -> None:
    for table in (
        "circuit_breaker",
        "compaction_config",
        "idempotency_keys",
        "snapshots",
        "messages",
        "events",
        "runs",
        "sessions",
    ):
        op.drop_table(table)
