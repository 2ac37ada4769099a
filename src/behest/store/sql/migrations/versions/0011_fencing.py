"""Several replicas on one database: fenced leases, stored cancel requests, live nodes.

- runs.lease_generation: increases at every claim of the run; every write of the run checks
  it in its own transaction, so a node that lost its claim writes nothing more.
- events.generation: the claim (lease generation) that wrote each event.
- runs.cancel_*: a CancelRun for a run another node executes, kept until that node (or the
  next to take the run up) ends it cancelled.
- nodes: the processes serving this database, each renewed with its leases; a configured
  node name is refused while a live process holds it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column("lease_generation", sa.BigInteger, nullable=False, server_default="0")
        )
        runs.add_column(sa.Column("cancel_requested_at", sa.DateTime(timezone=True)))
        runs.add_column(sa.Column("cancel_by", sa.String(200), nullable=False, server_default=""))
        runs.add_column(sa.Column("cancel_reason", sa.Text, nullable=False, server_default=""))
        runs.add_column(
            sa.Column("cancel_source", sa.SmallInteger, nullable=False, server_default="0")
        )
    with op.batch_alter_table("events") as events:
        events.add_column(
            sa.Column("generation", sa.BigInteger, nullable=False, server_default="0")
        )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("instance", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("nodes")
    with op.batch_alter_table("events") as events:
        events.drop_column("generation")
    with op.batch_alter_table("runs") as runs:
        for column in (
            "cancel_source",
            "cancel_reason",
            "cancel_by",
            "cancel_requested_at",
            "lease_generation",
        ):
            runs.drop_column(column)
