"""Indexes for retention and session listings: idempotency keys by run, sessions by tenant.

Pruning and erasure delete a run's idempotency keys by run id, and ListSessions reads a
tenant's sessions newest first; without these both scan their whole table.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_run", "idempotency_keys", ["run_id"])
    op.create_index("ix_sessions_tenant_created", "sessions", ["tenant", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant_created", table_name="sessions")
    op.drop_index("ix_idempotency_keys_run", table_name="idempotency_keys")
