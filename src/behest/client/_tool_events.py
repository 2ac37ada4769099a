"""The events of tool calls beyond their start and end, as the client reads them: an approval
and a client tool's call waited for and answered, an outcome unknown, its reconciliation, a
retry, a handoff, a question to the user and its answer, a tool's progress (one type per
AgentEvent kind, like client/_events.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from behest.client._enums import Decision, ElicitAction, Verdict
from behest.client._records import json_object
from behest.client._types import ToolCall


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A tool call waits for an approval."""

    call: ToolCall = field(default_factory=lambda: ToolCall("", ""))
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    """An approval request was decided (or timed out)."""

    call_id: str = ""
    tool_name: str = ""
    decision: Decision = Decision.UNSPECIFIED
    decided_by: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ClientToolRequested:
    """A client tool call waits for the caller's result."""

    call: ToolCall = field(default_factory=lambda: ToolCall("", ""))
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ClientToolAnswered:
    """A client tool call got its result (or timed out)."""

    call_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    answered_by: str = ""
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class ToolOutcomeUnknown:
    """behest stopped while a tool that is not idempotent ran: the run waits for the
    execution to be reconciled (BehestClient.reconcile), or fails at `expires_at`."""

    execution_id: str = ""
    call_id: str = ""
    tool_name: str = ""
    attempt: int = 0
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ToolExecutionReconciled:
    """How an execution whose outcome was unknown was reconciled, and by whom."""

    execution_id: str = ""
    call_id: str = ""
    tool_name: str = ""
    verdict: Verdict = Verdict.UNSPECIFIED
    reconciled_by: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolRetryScheduled:
    """A tool call runs again as its next attempt; the model sees only the last result."""

    call_id: str = ""
    tool_name: str = ""
    execution_id: str = ""
    next_attempt: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UserMessageAdded:
    """A message sent to the session while the run went on (on_busy STEER) joined its
    transcript; the next model call sees it."""

    message_id: str = ""
    text: str = ""


@dataclass(frozen=True, slots=True)
class Handoff:
    """The model called `transfer_to_<agent>`: from the next model call on the run goes on
    under `to_agent` (its instructions, tools and model), with its transcript, budgets and
    usage; `reason` is the model's (may be empty)."""

    call_id: str = ""
    from_agent: str = ""
    from_version: int = 0
    to_agent: str = ""
    to_version: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ElicitationRequested:
    """A running tool asked the user a question: the call waits for the answer
    (BehestClient.submit_elicitation_answers, by `elicitation_id`) until `expires_at`, the run
    WAITING_FOR_INPUT meanwhile. An accepted answer's content is a JSON object that fits
    `requested_schema` (JSON text; `schema`: parsed)."""

    elicitation_id: str = ""
    call_id: str = ""
    tool_name: str = ""
    message: str = ""
    requested_schema: str = ""
    expires_at: datetime | None = None

    @property
    def schema(self) -> dict[str, Any]:
        return json_object(self.requested_schema)


@dataclass(frozen=True, slots=True)
class ElicitationAnswered:
    """How a question was answered and by whom (the content goes to the tool only);
    `timed_out`: nobody answered in time (CANCEL); `replayed`: the tool ran again after a
    restart, asked again and got the stored answer."""

    elicitation_id: str = ""
    call_id: str = ""
    tool_name: str = ""
    action: ElicitAction = ElicitAction.UNSPECIFIED
    answered_by: str = ""
    timed_out: bool = False
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """How far a running tool got: `progress` of `total` (0: the tool did not say), in the
    tool's own units, with its message. At most one every half second per call, and the last
    one before the call's result always."""

    call_id: str = ""
    tool_name: str = ""
    progress: float = 0.0
    total: float = 0.0
    message: str = ""
