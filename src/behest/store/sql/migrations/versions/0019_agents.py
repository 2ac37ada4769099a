"""Agents as versioned resources: agents, their versions and aliases; the agent a run is of.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

Ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("latest_version", sa.Integer, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("archived", sa.Boolean, nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("updated_at", Ts, nullable=False),
    )
    op.create_table(
        "agent_versions",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("created_by", sa.Text, nullable=False),
    )
    op.create_table(
        "agent_aliases",
        sa.Column("tenant", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("alias", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("agent_name", sa.String(64), nullable=False, server_default=""))
        runs.add_column(sa.Column("agent_version", sa.Integer, nullable=False, server_default="0"))
        runs.add_column(sa.Column("agent_pins", sa.Text, nullable=False, server_default="{}"))
        runs.add_column(
            sa.Column("current_agent", sa.String(64), nullable=False, server_default="")
        )
    op.create_index(
        "ix_runs_agent",
        "runs",
        ["tenant", "agent_name", "agent_version", "created_at"],
        sqlite_where=sa.text("agent_name != ''"),
        postgresql_where=sa.text("agent_name != ''"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_agent", "runs")
    with op.batch_alter_table("runs") as runs:
        for column in ("current_agent", "agent_pins", "agent_version", "agent_name"):
            runs.drop_column(column)
    op.drop_table("agent_aliases")
    op.drop_table("agent_versions")
    op.drop_table("agents")
