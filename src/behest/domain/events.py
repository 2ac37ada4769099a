"""Run events: one dataclass per AgentEvent kind, and the numbered envelope."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from behest.domain.content import ContentPart
from behest.domain.execution_events import (
    ElicitationAnswered,
    ElicitationRequested,
    ToolExecutionReconciled,
    ToolOutcomeUnknown,
    ToolProgress,
    ToolRetryScheduled,
)
from behest.domain.messages import ToolCall
from behest.domain.runs import BusyPolicy, FinishReason, RunStatus
from behest.domain.spend import BudgetKind, CancelSource, FailureCode, Money, TokenUsage
from behest.domain.waits import Decision


@dataclass(frozen=True, slots=True)
class RunStarted:
    session_id: str
    provider: str
    model: str
    # The run's content parts as references (no bytes); () for a plain text input.
    content: tuple[ContentPart, ...] = ()
    # The stored agent the run is of, and the version it resolved to ("" and 0: none).
    agent_name: str = ""
    agent_version: int = 0
    # The run of the session it cancelled to start, and how (domain/runs.py BusyPolicy).
    interrupted_run_id: str = ""
    on_busy: BusyPolicy = BusyPolicy.UNSPECIFIED
    # The run it waited for (BusyPolicy.ENQUEUE).
    waited_for_run_id: str = ""


@dataclass(frozen=True, slots=True)
class ContextBuilt:
    message_count: int


@dataclass(frozen=True, slots=True)
class ModelStarted:
    provider: str
    model: str
    iteration: int
    # The agent making the call, after a handoff the target ("" and 0: a run of none).
    agent_name: str = ""
    agent_version: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    delta: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (thinking); never part of the answer's text."""

    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call_id: str
    tool_name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallCompleted:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolExecutionStarted:
    call_id: str
    tool_name: str
    # The execution record (domain/executions.py) and its attempt; "" and 0 in events
    # stored before behest 0.9.
    execution_id: str = ""
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class ToolExecutionFinished:
    call_id: str
    tool_name: str
    duration_ms: int
    is_error: bool = False
    # The run was cancelled while the tool ran (runs/ending.py): cut, its outcome unknown.
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class AssistantMessageCommitted:
    message_id: str


@dataclass(frozen=True, slots=True)
class ToolMessageCommitted:
    message_id: str


@dataclass(frozen=True, slots=True)
class UsageRecorded:
    usage: TokenUsage
    cost: Money | None = None


@dataclass(frozen=True, slots=True)
class RunCompleted:
    finish_reason: FinishReason
    iterations: int


@dataclass(frozen=True, slots=True)
class RunFailed:
    error: str
    code: FailureCode = FailureCode.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class RunCancelled:
    cancelled_by: str = ""
    reason: str = ""
    source: CancelSource = CancelSource.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    budget: BudgetKind
    limit: str
    used: str


@dataclass(frozen=True, slots=True)
class DoomLoopDetected:
    description: str


@dataclass(frozen=True, slots=True)
class CompactionCircuitOpened:
    consecutive_failures: int


@dataclass(frozen=True, slots=True)
class CompactionStarted:
    messages_before: int
    estimated_tokens_before: int
    reason: str


@dataclass(frozen=True, slots=True)
class CompactionFinished:
    messages_after: int
    estimated_tokens_after: int
    pruned_only: bool
    succeeded: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    call: ToolCall
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    call_id: str
    tool_name: str
    decision: Decision
    decided_by: str
    reason: str


@dataclass(frozen=True, slots=True)
class ClientToolRequested:
    call: ToolCall
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ClientToolAnswered:
    call_id: str
    tool_name: str
    is_error: bool
    answered_by: str
    timed_out: bool


@dataclass(frozen=True, slots=True)
class SubRunStarted:
    call_id: str
    child_run_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class SubRunFinished:
    call_id: str
    child_run_id: str
    status: RunStatus
    usage: TokenUsage
    cost: Money | None = None


@dataclass(frozen=True, slots=True)
class OutputRejected:
    """A final answer did not fit the run's response format; `repairing`: asked again."""

    error: str
    repairing: bool


@dataclass(frozen=True, slots=True)
class Handoff:
    """The run goes on under another agent from its next model call (a transfer_to_ call)."""

    call_id: str
    from_agent: str
    from_version: int
    to_agent: str
    to_version: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UserMessageAdded:
    """A message sent while the run went on (BusyPolicy.STEER) joined its transcript."""

    message_id: str
    text: str


Payload = (
    RunStarted
    | ContextBuilt
    | ModelStarted
    | TextDelta
    | ToolCallStarted
    | ToolCallDelta
    | ToolCallCompleted
    | ToolExecutionStarted
    | ToolExecutionFinished
    | AssistantMessageCommitted
    | ToolMessageCommitted
    | UsageRecorded
    | RunCompleted
    | RunFailed
    | RunCancelled
    | DoomLoopDetected
    | CompactionCircuitOpened
    | CompactionStarted
    | CompactionFinished
    | ApprovalRequested
    | ApprovalResolved
    | ClientToolRequested
    | ClientToolAnswered
    | BudgetExceeded
    | SubRunStarted
    | SubRunFinished
    | OutputRejected
    | ReasoningDelta
    | ToolOutcomeUnknown
    | ToolExecutionReconciled
    | ToolRetryScheduled
    | Handoff
    | UserMessageAdded
    | ElicitationRequested
    | ElicitationAnswered
    | ToolProgress
)

# The stable name of each kind of event: how it is stored (events.kind) and the field of
# AgentEvent's `event` oneof that carries it. Names never change; a new kind gets a new one.
KINDS: dict[type[Payload], str] = {
    RunStarted: "run_started",
    ContextBuilt: "context_built",
    ModelStarted: "model_started",
    TextDelta: "text_delta",
    ToolCallStarted: "tool_call_started",
    ToolCallDelta: "tool_call_delta",
    ToolCallCompleted: "tool_call_completed",
    ToolExecutionStarted: "tool_execution_started",
    ToolExecutionFinished: "tool_execution_finished",
    AssistantMessageCommitted: "assistant_message_committed",
    ToolMessageCommitted: "tool_message_committed",
    UsageRecorded: "usage_recorded",
    RunCompleted: "run_completed",
    RunFailed: "run_failed",
    RunCancelled: "run_cancelled",
    DoomLoopDetected: "doom_loop_detected",
    CompactionCircuitOpened: "compaction_circuit_opened",
    CompactionStarted: "compaction_started",
    CompactionFinished: "compaction_finished",
    ApprovalRequested: "approval_requested",
    ApprovalResolved: "approval_resolved",
    ClientToolRequested: "client_tool_requested",
    ClientToolAnswered: "client_tool_answered",
    BudgetExceeded: "budget_exceeded",
    SubRunStarted: "sub_run_started",
    SubRunFinished: "sub_run_finished",
    OutputRejected: "output_rejected",
    ReasoningDelta: "reasoning_delta",
    ToolOutcomeUnknown: "tool_outcome_unknown",
    ToolExecutionReconciled: "tool_execution_reconciled",
    ToolRetryScheduled: "tool_retry_scheduled",
    Handoff: "handoff",
    UserMessageAdded: "user_message_added",
    ElicitationRequested: "elicitation_requested",
    ElicitationAnswered: "elicitation_answered",
    ToolProgress: "tool_progress",
}
PAYLOADS: dict[str, type[Payload]] = {name: cls for cls, name in KINDS.items()}

TERMINAL = (RunCompleted, RunFailed, RunCancelled)
TERMINAL_KINDS = frozenset(KINDS[cls] for cls in TERMINAL)


def kind_of(payload: Payload) -> str:
    """The stable name of a payload's kind."""
    return KINDS[type(payload)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One numbered event of a run's log."""

    run_id: str
    sequence: int
    payload: Payload
    timestamp: datetime
    trace_id: str = ""
    span_id: str = ""

    @property
    def is_terminal(self) -> bool:
        return isinstance(self.payload, TERMINAL)
