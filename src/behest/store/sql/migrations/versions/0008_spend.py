"""Spend: failure codes, prompt-cache tokens, costs and budgets of runs and their snapshots.

Runs stored before this have no failure code, no cached tokens, no cost and no budget.
Costs are exact decimal strings (str(Decimal)), never floats. Usage by day and since an
instant reads a range of one tenant's runs, which ix_runs_tenant_created (0006) serves.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-15
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _counter(name: str, kind: type[sa.types.TypeEngine[int]] = sa.BigInteger) -> sa.Column[int]:
    return sa.Column(name, kind, nullable=False, server_default="0")


def _spend_columns() -> list[sa.Column[Any]]:
    """The columns runs and snapshots both get."""
    return [
        _counter("cached_input_tokens"),
        _counter("cache_write_tokens"),
        sa.Column("cost", sa.Text, nullable=True),
        sa.Column("currency", sa.String(8), nullable=False, server_default=""),
    ]


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for column in [
            _counter("failure_code", sa.SmallInteger),
            *_spend_columns(),
            _counter("max_tokens"),
            _counter("max_tool_calls", sa.Integer),
            _counter("max_wall_seconds", sa.Integer),
            sa.Column("max_cost", sa.Text, nullable=True),
        ]:
            batch.add_column(column)
    with op.batch_alter_table("snapshots") as batch:
        for column in [*_spend_columns(), _counter("tool_calls", sa.Integer)]:
            batch.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        for name in ("tool_calls", "currency", "cost", "cache_write_tokens", "cached_input_tokens"):
            batch.drop_column(name)
    with op.batch_alter_table("runs") as batch:
        for name in (
            "max_cost",
            "max_wall_seconds",
            "max_tool_calls",
            "max_tokens",
            "currency",
            "cost",
            "cache_write_tokens",
            "cached_input_tokens",
            "failure_code",
        ):
            batch.drop_column(name)
