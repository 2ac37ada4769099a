"""Forked sessions: a session's parent and the position through which it shares its
history; a session erased while forks share its messages is kept as a tombstone.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as sessions:
        sessions.add_column(sa.Column("parent_session_id", sa.String(36), nullable=True))
        sessions.add_column(sa.Column("forked_through", sa.Integer, nullable=True))
        sessions.add_column(sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_sessions_parent",
        "sessions",
        ["parent_session_id"],
        sqlite_where=sa.text("parent_session_id IS NOT NULL"),
        postgresql_where=sa.text("parent_session_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_parent", "sessions")
    with op.batch_alter_table("sessions") as sessions:
        for column in ("erased_at", "forked_through", "parent_session_id"):
            sessions.drop_column(column)
