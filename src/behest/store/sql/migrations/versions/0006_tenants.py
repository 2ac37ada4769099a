"""Tenants: sessions and runs belong to one; compaction settings and breaker per tenant.

Everything stored so far belongs to the default tenant ("default"), the one every caller was
before authentication existed; idempotency keys already carry it (their `identity`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

DEFAULT_TENANT = "default"
_CONFIG_COLUMNS = (
    "auto, prune, buffer_tokens, keep_tokens, tail_turns, model, provider, "
    "circuit_breaker_threshold"
)


def upgrade() -> None:
    for table in ("sessions", "runs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("tenant", sa.String(200), nullable=False, server_default=DEFAULT_TENANT)
            )
    op.create_index("ix_runs_tenant_created", "runs", ["tenant", "created_at"])
    op.execute(f"UPDATE idempotency_keys SET identity = '{DEFAULT_TENANT}'")
    # The single-row tables (id = 1) become one row per tenant; the old row is the default's.
    op.create_table(
        "compaction_config_by_tenant",
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
    op.execute(
        f"INSERT INTO compaction_config_by_tenant (tenant, {_CONFIG_COLUMNS}) "
        f"SELECT '{DEFAULT_TENANT}', {_CONFIG_COLUMNS} FROM compaction_config"
    )
    op.drop_table("compaction_config")
    op.rename_table("compaction_config_by_tenant", "compaction_config")
    op.create_table(
        "circuit_breaker_by_tenant",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.execute(
        "INSERT INTO circuit_breaker_by_tenant (tenant, consecutive_failures, opened_at) "
        f"SELECT '{DEFAULT_TENANT}', consecutive_failures, opened_at FROM circuit_breaker"
    )
    op.drop_table("circuit_breaker")
    op.rename_table("circuit_breaker_by_tenant", "circuit_breaker")


def downgrade() -> None:
    raise NotImplementedError("tenants cannot be merged back into one")
