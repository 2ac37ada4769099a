"""The event payloads of tool executions whose outcome was unknown or that run again
(domain/executions.py); part of domain/events.py's Payload, named there too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from behest.domain.executions import Verdict


@dataclass(frozen=True, slots=True)
class ToolOutcomeUnknown:
    """behest stopped while a tool that is not idempotent ran: the run waits until the
    execution is reconciled, or fails at `expires_at`."""

    execution_id: str
    call_id: str
    tool_name: str
    attempt: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ToolExecutionReconciled:
    """How an execution whose outcome was unknown was reconciled, and by whom."""

    execution_id: str
    call_id: str
    tool_name: str
    verdict: Verdict
    reconciled_by: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolRetryScheduled:
    """A tool call runs again as its next attempt; the model sees only the last result."""

    call_id: str
    tool_name: str
    execution_id: str
    next_attempt: int
    reason: str = ""
