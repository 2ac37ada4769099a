"""Event kinds stored under their stable names (run_started, text_delta, …), not class names.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The class names stored before this revision, and the stable name of each (frozen here: the
# domain's registry may grow, this table never changes).
RENAMES = {
    "RunStarted": "run_started",
    "ContextBuilt": "context_built",
    "ModelStarted": "model_started",
    "TextDelta": "text_delta",
    "ToolCallStarted": "tool_call_started",
    "ToolCallDelta": "tool_call_delta",
    "ToolCallCompleted": "tool_call_completed",
    "ToolExecutionStarted": "tool_execution_started",
    "ToolExecutionFinished": "tool_execution_finished",
    "AssistantMessageCommitted": "assistant_message_committed",
    "ToolMessageCommitted": "tool_message_committed",
    "UsageRecorded": "usage_recorded",
    "RunCompleted": "run_completed",
    "RunFailed": "run_failed",
    "RunCancelled": "run_cancelled",
    "DoomLoopDetected": "doom_loop_detected",
    "CompactionCircuitOpened": "compaction_circuit_opened",
    "CompactionStarted": "compaction_started",
    "CompactionFinished": "compaction_finished",
}

_events = sa.table("events", sa.column("kind", sa.String))


def upgrade() -> None:
    for old, new in RENAMES.items():
        op.execute(_events.update().where(_events.c.kind == old).values(kind=new))


def downgrade() -> None:
    for old, new in RENAMES.items():
        op.execute(_events.update().where(_events.c.kind == new).values(kind=old))
