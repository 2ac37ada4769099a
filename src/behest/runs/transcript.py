"""Keeping a session's transcript well-formed when a run ends in the middle of a turn.

Providers reject an assistant tool call without a tool result after it. A run that fails,
is cancelled or abandoned while calls are unanswered gets an error result for each of them,
committed with its terminal event, so later runs on the session can go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from behest.domain.messages import Message, Role, ToolCall


def unanswered_calls(messages: Sequence[Message], run_id: str) -> list[ToolCall]:
    """Tool calls of the run's last assistant message that have no tool result."""
    mine = [m for m in messages if m.run_id == run_id]
    last = next((m for m in reversed(mine) if m.role == Role.ASSISTANT), None)
    if last is None:
        return []
    answered = {m.tool_call_id for m in mine if m.role == Role.TOOL}
    return [call for call in last.tool_calls if call.id not in answered]


def closing_results(
    messages: Sequence[Message], *, run_id: str, session_id: str, reason: str, position: int
) -> list[Message]:
    """An error tool message for every unanswered call of the run, from `position` on."""
    now = datetime.now(UTC)
    return [
        Message(
            id=str(uuid.uuid4()),
            session_id=session_id,
            run_id=run_id,
            position=position + offset,
            role=Role.TOOL,
            text=f"not run: {reason}",
            created_at=now,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=True,
        )
        for offset, call in enumerate(unanswered_calls(messages, run_id))
    ]
