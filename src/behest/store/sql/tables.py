"""Table definitions (SQLAlchemy Core). Schema changes also need a migration in migrations/."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

metadata = sa.MetaData()


class UtcDateTime(sa.TypeDecorator[datetime]):
    """TIMESTAMP WITH TIME ZONE holding UTC; naive values are taken as UTC (as asyncpg does).

    SQLite keeps no offset: without the conversion an instant at +02:00 would be stored as
    its wall-clock time and read back two hours off, and would sort wrongly.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


Ts = UtcDateTime()

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("updated_at", Ts, nullable=False),
    # The one run allowed to be active on the session; NULL when idle.
    sa.Column("active_run_id", sa.String(36), nullable=True),
    # The tenant it belongs to (migration 0006).
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default"),
    # A fork (migration 0021): the session it shares its history with through a position
    # (store/sql/forks.py); erased, it is kept (a tombstone) while forks share its messages.
    sa.Column("parent_session_id", sa.String(36), nullable=True),
    sa.Column("forked_through", sa.Integer, nullable=True),
    sa.Column("erased_at", Ts, nullable=True),
    sa.Index(
        "ix_sessions_parent",
        "parent_session_id",
        sqlite_where=sa.text("parent_session_id IS NOT NULL"),
        postgresql_where=sa.text("parent_session_id IS NOT NULL"),
    ),
    sa.Index("ix_sessions_active_run", "active_run_id"),
    sa.Index("ix_sessions_tenant_created", "tenant", "created_at"),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("session_id", sa.String(36), sa.ForeignKey("sessions.id"), nullable=False),
    sa.Column("status", sa.SmallInteger, nullable=False),
    sa.Column("provider", sa.String(200), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("input", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("tool_choice", sa.String(200), nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("updated_at", Ts, nullable=False),
    sa.Column("iterations", sa.Integer, nullable=False),
    sa.Column("finish_reason", sa.SmallInteger, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("traceparent", sa.String(64), nullable=False),
    # Per-run options (migration 0002); tools is a JSON list of names.
    sa.Column("instructions", sa.Text, nullable=False, server_default=""),
    sa.Column("tools", sa.Text, nullable=False, server_default="[]"),
    sa.Column("max_iterations", sa.Integer, nullable=False, server_default="0"),
    # The node executing the run and until when its claim holds (migration 0003).
    sa.Column("owner", sa.String(200), nullable=True),
    sa.Column("lease_expires_at", Ts, nullable=True),
    # The tenant it belongs to (migration 0006).
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default"),
    # Options for waiting (migration 0007): client_tools is a JSON list of objects (name,
    # description, parameters_schema), approval_required_tools a JSON list of names.
    sa.Column("client_tools", sa.Text, nullable=False, server_default="[]"),
    sa.Column("approval_required_tools", sa.Text, nullable=False, server_default="[]"),
    sa.Column("approve_side_effects", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("approval_timeout_s", sa.Integer, nullable=False, server_default="0"),
    sa.Column("client_tool_timeout_s", sa.Integer, nullable=False, server_default="0"),
    # Spend (migration 0008, domain/spend.py): why it failed, the prompt cache's tokens
    # (counted apart from input_tokens), its cost as an exact decimal string (NULL: its
    # model has no prices; currency '' then), and its budget (0 or NULL: no limit).
    sa.Column("failure_code", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("cached_input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # Output tokens spent reasoning, part of output_tokens (migration 0015).
    sa.Column("reasoning_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cost", sa.Text, nullable=True),
    sa.Column("currency", sa.String(8), nullable=False, server_default=""),
    sa.Column("max_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("max_tool_calls", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_wall_seconds", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_cost", sa.Text, nullable=True),
    # Sub-agent runs (migration 0009): the run that started it (NULL: none), whether it may
    # start some, and how deep it is (0: started by a client).
    sa.Column("parent_run_id", sa.String(36), nullable=True),
    sa.Column("allow_sub_agents", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("depth", sa.Integer, nullable=False, server_default="0"),
    # Fencing (migration 0011): increases at every claim; a write of the run checks it. A
    # cancel asked of the run while another node executed it, kept until the run ends.
    sa.Column("lease_generation", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cancel_requested_at", Ts, nullable=True),
    sa.Column("cancel_by", sa.String(200), nullable=False, server_default=""),
    sa.Column("cancel_reason", sa.Text, nullable=False, server_default=""),
    sa.Column("cancel_source", sa.SmallInteger, nullable=False, server_default="0"),
    # Structured output (migration 0012): the format the final answer must fit ('' and '':
    # none; the schema as compact JSON text), and the answer that fitted, as compact JSON
    # text (NULL: none).
    sa.Column("response_format_name", sa.String(64), nullable=False, server_default=""),
    sa.Column("response_format_schema", sa.Text, nullable=False, server_default=""),
    sa.Column("output", sa.Text, nullable=True),
    # Reasoning (migration 0013): OpenAI's reasoning_effort ('' none) and Anthropic's
    # thinking budget (0 none).
    sa.Column("reasoning_effort", sa.String(16), nullable=False, server_default=""),
    sa.Column("reasoning_budget_tokens", sa.Integer, nullable=False, server_default="0"),
    # Agents (migration 0019): the agent and version it resolved to ('' and 0: none), the
    # versions of the agents it may reach (a JSON object), the agent it is under now.
    sa.Column("agent_name", sa.String(64), nullable=False, server_default=""),
    sa.Column("agent_version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("agent_pins", sa.Text, nullable=False, server_default="{}"),
    sa.Column("current_agent", sa.String(64), nullable=False, server_default=""),
    # Enqueued on a busy session (migration 0020): since when it waits for its turn (NULL:
    # it does not), and the run it was queued after ('': none).
    sa.Column("queued_at", Ts, nullable=True),
    sa.Column("queued_after", sa.String(36), nullable=False, server_default=""),
    # Steering closed (migration 0020): the run is ending and takes no more messages.
    sa.Column("steers_closed", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Index("ix_runs_session_created", "session_id", "created_at"),
    sa.Index("ix_runs_status", "status"),
    # Also serves daily_usage and spent_since: a range of one tenant's created_at.
    sa.Index("ix_runs_tenant_created", "tenant", "created_at"),
    # The runs waiting for their turn on a session, oldest first; only those are in it.
    sa.Index(
        "ix_runs_queued",
        "session_id",
        "queued_at",
        sqlite_where=sa.text("queued_at IS NOT NULL"),
        postgresql_where=sa.text("queued_at IS NOT NULL"),
    ),
    # ListRuns of an agent (or a version of it). Only runs of an agent are in it, so the
    # creation of the others does not write to it.
    sa.Index(
        "ix_runs_agent",
        "tenant",
        "agent_name",
        "agent_version",
        "created_at",
        sqlite_where=sa.text("agent_name != ''"),
        postgresql_where=sa.text("agent_name != ''"),
    ),
    # child_runs: one parent's children in order. Only runs with a parent are in it, so the
    # creation of the others (nearly all) does not write to it.
    sa.Index(
        "ix_runs_parent",
        "parent_run_id",
        "created_at",
        sqlite_where=sa.text("parent_run_id IS NOT NULL"),
        postgresql_where=sa.text("parent_run_id IS NOT NULL"),
    ),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("sequence", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("span_id", sa.String(16), nullable=False),
    # The lease generation of the claim that wrote it (migration 0011).
    sa.Column("generation", sa.BigInteger, nullable=False, server_default="0"),
)

messages = sa.Table(
    "messages",
    metadata,
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
    # Compaction summaries stand for the messages up to this position (migration 0004).
    sa.Column("summary_through", sa.Integer, nullable=True),
    # An assistant message's provider reasoning blocks, JSON text (migration 0013; NULL: none).
    sa.Column("reasoning_blocks", sa.Text, nullable=True),
    # A user message's content parts as references, JSON text (migration 0014; NULL: none);
    # their bytes are in content_blobs.
    sa.Column("parts", sa.Text, nullable=True),
    sa.Column("created_at", Ts, nullable=False),
    # Out of the session's history: its run was rolled back (migration 0020); still the run's.
    sa.Column("rolled_back", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.UniqueConstraint("session_id", "position", name="uq_messages_session_position"),
    sa.Index("ix_messages_run", "run_id"),
)

# The bytes of inline content parts (images, files), by message and part index (migration
# 0014): read only when a transcript goes to a model, erased with their message.
content_blobs = sa.Table(
    "content_blobs",
    metadata,
    sa.Column("message_id", sa.String(36), primary_key=True),
    sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("session_id", sa.String(36), nullable=False),
    sa.Column("status", sa.SmallInteger, nullable=False),
    sa.Column("iteration", sa.Integer, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("model_calls", sa.Integer, nullable=False),
    sa.Column("pending_tool_calls", sa.Text, nullable=False),
    sa.Column("updated_at", Ts, nullable=False),
    sa.Column("finish_reason", sa.SmallInteger, nullable=False, server_default="0"),
    # Spend (migration 0008): as on runs, and the tool calls made so far.
    sa.Column("cached_input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # Output tokens spent reasoning, part of output_tokens (migration 0015).
    sa.Column("reasoning_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cost", sa.Text, nullable=True),
    sa.Column("currency", sa.String(8), nullable=False, server_default=""),
    sa.Column("tool_calls", sa.Integer, nullable=False, server_default="0"),
)

# The tool calls runs wait for, and their answers (migration 0007; domain/waits.py). A row is
# answered once answered_at is set: by an answer, or by its timing out (timed_out).
pending_calls = sa.Table(
    "pending_calls",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("call_id", sa.String(200), primary_key=True),
    sa.Column("session_id", sa.String(36), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("tool_name", sa.String(200), nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("ordinal", sa.Integer, nullable=False),
    sa.Column("requested_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
    sa.Column("decision", sa.SmallInteger, nullable=True),
    sa.Column("text", sa.Text, nullable=False, server_default=""),
    sa.Column("is_error", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("answered_by", sa.String(200), nullable=False, server_default=""),
    sa.Column("answered_at", Ts, nullable=True),
    sa.Column("timed_out", sa.Boolean, nullable=False, server_default=sa.false()),
    # An outcome unknown (kind 3): the execution to reconcile, and the verdict (migration 0016).
    sa.Column("execution_id", sa.String(36), nullable=True),
    sa.Column("verdict", sa.SmallInteger, nullable=True),
    # A question (kind 4): Question as JSON, and the answer's action (migration 0022).
    sa.Column("question", sa.Text, nullable=True),
    sa.Column("action", sa.SmallInteger, nullable=True),
    # always_allowed: a session's ALLOW_ALWAYS decisions.
    sa.Index("ix_pending_calls_session", "session_id"),
    # resumable_runs: whether a run still waits, from the small set of unanswered calls.
    sa.Index(
        "ix_pending_calls_waiting",
        "run_id",
        "expires_at",
        sqlite_where=sa.text("answered_at IS NULL"),
        postgresql_where=sa.text("answered_at IS NULL"),
    ),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    # The tenant (the column predates tenants: it was one "default" identity).
    sa.Column("identity", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("run_id", sa.String(36), nullable=False),
    sa.Column("created_at", Ts, nullable=False),
    # Retention and erasure delete keys by run (migration 0010).
    sa.Index("ix_idempotency_keys_run", "run_id"),
)

# One row per tenant that set its own (migration 0006); others get the defaults.
compaction_config = sa.Table(
    "compaction_config",
    metadata,
    sa.Column("tenant", sa.String(200), primary_key=True),
    sa.Column("auto", sa.Boolean, nullable=False),
    sa.Column("prune", sa.Boolean, nullable=False),
    sa.Column("buffer_tokens", sa.BigInteger, nullable=False),
    sa.Column("keep_tokens", sa.BigInteger, nullable=False),
    sa.Column("tail_turns", sa.Integer, nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("provider", sa.String(200), nullable=False),
    sa.Column("circuit_breaker_threshold", sa.Integer, nullable=False),
)

circuit_breaker = sa.Table(
    "circuit_breaker",
    metadata,
    sa.Column("tenant", sa.String(200), primary_key=True),
    sa.Column("consecutive_failures", sa.Integer, nullable=False),
    sa.Column("opened_at", Ts, nullable=True),
)


# The processes serving this database (migration 0011), each renewed with its leases until
# `expires_at`: a configured node name is refused while a live process holds it, and
# adoption shares lapsed runs among the live ones.
nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("instance", sa.String(64), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", Ts, nullable=False),
    sa.Column("expires_at", Ts, nullable=False),
)
