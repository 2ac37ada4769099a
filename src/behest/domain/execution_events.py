"""The event payloads of tool executions whose outcome was unknown, that run again
(domain/executions.py), that ask the user a question (runs/asking.py) or tell how far they
got (runs/tool_progress.py); part of domain/events.py's Payload, named there too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from behest.domain.executions import Verdict
from behest.domain.waits import ElicitAction


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


@dataclass(frozen=True, slots=True)
class ElicitationRequested:
    """A running tool asked the user a question (`requested_schema`: the JSON Schema of an
    accepted answer's content, as JSON text); the call waits for the answer until
    `expires_at`, its run WAITING_FOR_INPUT meanwhile."""

    elicitation_id: str
    call_id: str
    tool_name: str
    message: str
    requested_schema: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ElicitationAnswered:
    """How a question was answered and by whom (the content goes to the tool only);
    `timed_out`: nobody answered in time (CANCEL); `replayed`: the tool ran again (after a
    restart) and asked again, and got the stored answer."""

    elicitation_id: str
    call_id: str
    tool_name: str
    action: ElicitAction
    answered_by: str
    timed_out: bool = False
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """How far a running tool got: `progress` of `total` (0: the tool did not say), in the
    tool's own units, with its message; an MCP server's progress notification or a plugin
    tool's ToolContext.progress. At most one every half second per call, and the last one
    before the call's result always."""

    call_id: str
    tool_name: str
    progress: float
    total: float = 0.0
    message: str = ""
