"""Tables of tools that run elsewhere (SQLAlchemy Core, in tables.py's metadata): tool
executions and their transitions (migration 0016), workers and their tasks (migration 0017),
the questions tasks ask (migration 0023). Schema changes also need a migration in
migrations/."""

from __future__ import annotations

import sqlalchemy as sa

from behest.store.sql.tables import Ts, metadata

# Every execution of a tool call (domain/executions.py; migration 0016).
tool_executions = sa.Table(
    "tool_executions",
    metadata,
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
    # One record per attempt of a call; a run's executions in the order they started.
    sa.UniqueConstraint("run_id", "call_id", "attempt", name="uq_tool_executions_attempt"),
)

tool_execution_transitions = sa.Table(
    "tool_execution_transitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("execution_id", sa.String(36), nullable=False),
    # The run's, so that erasure and retention delete them by run.
    sa.Column("run_id", sa.String(36), nullable=False),
    sa.Column("status", sa.SmallInteger, nullable=False),
    sa.Column("at", Ts, nullable=False),
    sa.Column("actor", sa.String(250), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Index("ix_tool_execution_transitions_execution", "execution_id", "id"),
    sa.Index("ix_tool_execution_transitions_run", "run_id"),
)

# Workers connected to any replica (domain/workers.py; migration 0017), and their tasks.
workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("node", sa.String(200), nullable=False),
    # The declared tools, as JSON (WorkerToolSpec fields).
    sa.Column("tools", sa.Text, nullable=False),
    sa.Column("max_tasks", sa.Integer, nullable=False),
    sa.Column("connected_at", Ts, nullable=False),
    sa.Column("seen_at", Ts, nullable=False),
    sa.Index("ix_workers_tenant", "tenant", "seen_at"),
)

worker_tasks = sa.Table(
    "worker_tasks",
    metadata,
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
    # How many questions it asked (worker_questions; migration 0023).
    sa.Column("questions", sa.Integer, nullable=False, server_default="0"),
    # A worker takes the oldest queued task of its tenant's that it serves.
    sa.Index("ix_worker_tasks_queue", "tenant", "state", "created_at"),
    sa.Index("ix_worker_tasks_worker", "worker_id"),
    sa.Index("ix_worker_tasks_run", "run_id"),
)

# The questions running tasks ask the run's user (domain/workers.py TaskQuestion; migration
# 0023): stored by the worker's replica, answered by the run's.
worker_questions = sa.Table(
    "worker_questions",
    metadata,
    sa.Column("execution_id", sa.String(36), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True),
    # The task's run, so that erasure and retention delete them by run.
    sa.Column("run_id", sa.String(36), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("requested_schema", sa.Text, nullable=False),
    sa.Column("asked_at", Ts, nullable=False),
    # The answer: set once, with answered_at (an ElicitAction; NULL with an error).
    sa.Column("action", sa.SmallInteger, nullable=True),
    sa.Column("content", sa.Text, nullable=False, server_default=""),
    sa.Column("error", sa.Text, nullable=False, server_default=""),
    sa.Column("answered_at", Ts, nullable=True),
    sa.Index("ix_worker_questions_run", "run_id"),
)
