"""Content parts: a user message's images and files.

- messages.parts: a message's content parts as references (kind, text, media type, URL,
  file name, digest, size), JSON text (NULL: a plain text message).
- content_blobs: the bytes of its inline parts, by message id and part index.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as messages:
        messages.add_column(sa.Column("parts", sa.Text, nullable=True))
    op.create_table(
        "content_blobs",
        sa.Column("message_id", sa.String(36), primary_key=True),
        sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("content_blobs")
    with op.batch_alter_table("messages") as messages:
        messages.drop_column("parts")
