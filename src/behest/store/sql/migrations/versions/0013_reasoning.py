"""Reasoning: a run's setting of how much the model should think.

- runs.reasoning_effort: "low", "medium" or "high" ('' none), OpenAI's reasoning_effort.
- runs.reasoning_budget_tokens: Anthropic's thinking budget (0 none).
- messages.reasoning_blocks: an assistant message's reasoning blocks its provider needs back
  exactly (Anthropic thinking with signatures), JSON text (NULL: none).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(
            sa.Column("reasoning_effort", sa.String(16), nullable=False, server_default="")
        )
        runs.add_column(
            sa.Column("reasoning_budget_tokens", sa.Integer, nullable=False, server_default="0")
        )
    with op.batch_alter_table("messages") as messages:
        messages.add_column(sa.Column("reasoning_blocks", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as messages:
        messages.drop_column("reasoning_blocks")
    with op.batch_alter_table("runs") as runs:
        for column in ("reasoning_budget_tokens", "reasoning_effort"):
            runs.drop_column(column)
