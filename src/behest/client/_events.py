"""A run's events as the client yields them: an `Event` whose `data` is one frozen type per
kind, named after the AgentEvent oneof field it is read from (RunStarted ← run_started).

`Event.kind` is the wire's stable name of the kind; a kind newer than this client has no
`data` (None) and is still yielded, so a caller can skip it. Match on the data:

    match event.data:
        case TextDelta(delta=text): ...
        case RunFailed(error=error, code=code): ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from behest.client._enums import (
    BudgetKind,
    BusyPolicy,
    CancelSource,
    FailureCode,
    FinishReason,
    RunStatus,
)
from behest.client._tool_events import (
    ApprovalRequested,
    ApprovalResolved,
    ClientToolAnswered,
    ClientToolRequested,
    ElicitationAnswered,
    ElicitationRequested,
    Handoff,
    ToolExecutionReconciled,
    ToolOutcomeUnknown,
    ToolProgress,
    ToolRetryScheduled,
    UserMessageAdded,
)
from behest.client._types import ContentPart, Cost, TokenUsage, ToolCall


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The run began (its first event); of an agent, its name and the version it resolved
    to."""

    session_id: str = ""
    provider: str = ""
    model: str = ""
    content: tuple[ContentPart, ...] = ()
    agent_name: str = ""
    agent_version: int = 0
    # The run of the session this one cancelled to start, and the policy (RunOptions.on_busy).
    interrupted_run_id: str = ""
    on_busy: BusyPolicy = BusyPolicy.UNSPECIFIED
    waited_for_run_id: str = ""  # the run it waited for (ENQUEUE)


@dataclass(frozen=True, slots=True)
class ContextBuilt:
    """The context for the next model call was put together."""

    message_count: int = 0


@dataclass(frozen=True, slots=True)
class ModelStarted:
    """A model call began; a repeated iteration is a retried or resumed call. The agent
    making it (after a handoff, the target), if the run is of one."""

    provider: str = ""
    model: str = ""
    iteration: int = 0
    agent_name: str = ""
    agent_version: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text of the answer."""

    delta: str = ""


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Text of the model's reasoning."""

    delta: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model began a tool call."""

    call_id: str = ""
    tool_name: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """Part of a tool call's arguments."""

    call_id: str = ""
    delta: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallCompleted:
    """The model finished a tool call."""

    call: ToolCall = field(default_factory=lambda: ToolCall("", ""))


@dataclass(frozen=True, slots=True)
class ToolExecutionStarted:
    """A server tool began to run."""

    call_id: str = ""
    tool_name: str = ""
    execution_id: str = ""  # the execution's record (BehestClient.get_tool_execution)
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class ToolExecutionFinished:
    """A server tool finished."""

    call_id: str = ""
    tool_name: str = ""
    duration_ms: int = 0
    is_error: bool = False
    # The run was cancelled while the tool ran: cut, whether it acted is unknown.
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class AssistantMessageCommitted:
    """The model's message was stored."""

    message_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolMessageCommitted:
    """A tool's result message was stored."""

    message_id: str = ""


@dataclass(frozen=True, slots=True)
class UsageRecorded:
    """A model call's tokens and cost."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: Cost | None = None


@dataclass(frozen=True, slots=True)
class RunCompleted:
    """The run completed (terminal)."""

    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    iterations: int = 0


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run failed (terminal)."""

    error: str = ""
    code: FailureCode = FailureCode.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class RunCancelled:
    """The run was cancelled (terminal)."""

    cancelled_by: str = ""
    reason: str = ""
    source: CancelSource = CancelSource.UNSPECIFIED


@dataclass(frozen=True, slots=True)
class DoomLoopDetected:
    """The model repeated itself."""

    description: str = ""


@dataclass(frozen=True, slots=True)
class CompactionCircuitOpened:
    """Compaction failed too often and is off for now."""

    consecutive_failures: int = 0


@dataclass(frozen=True, slots=True)
class CompactionStarted:
    """The transcript is being compacted."""

    messages_before: int = 0
    estimated_tokens_before: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CompactionFinished:
    """Compaction ended."""

    messages_after: int = 0
    estimated_tokens_after: int = 0
    pruned_only: bool = False
    succeeded: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    """A budget ran out; `limit` and `used` are decimal text."""

    budget: BudgetKind = BudgetKind.UNSPECIFIED
    limit: str = ""
    used: str = ""


@dataclass(frozen=True, slots=True)
class SubRunStarted:
    """A sub-agent run began."""

    call_id: str = ""
    child_run_id: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class SubRunFinished:
    """A sub-agent run ended."""

    call_id: str = ""
    child_run_id: str = ""
    status: RunStatus = RunStatus.UNSPECIFIED
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: Cost | None = None


@dataclass(frozen=True, slots=True)
class OutputRejected:
    """The final answer did not fit the response format."""

    error: str = ""
    repairing: bool = False


EventData = (
    RunStarted
    | ContextBuilt
    | ModelStarted
    | TextDelta
    | ReasoningDelta
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
    | ToolOutcomeUnknown
    | ToolExecutionReconciled
    | ToolRetryScheduled
    | Handoff
    | UserMessageAdded
    | ElicitationRequested
    | ElicitationAnswered
    | ToolProgress
)


def _kind(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


# The wire's name of each kind → its type: the oneof field is the class name in snake case.
EVENT_TYPES: dict[str, type[Any]] = {_kind(cls): cls for cls in EventData.__args__}
_TERMINAL = (RunCompleted, RunFailed, RunCancelled)


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a run's log: its sequence (1, 2, … per run), kind and data."""

    sequence: int
    run_id: str
    kind: str
    data: EventData | None
    timestamp: datetime | None = None
    trace_id: str = ""
    span_id: str = ""
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)

    @property
    def terminal(self) -> bool:
        """Whether the event ends its run (RunCompleted, RunFailed or RunCancelled)."""
        return isinstance(self.data, _TERMINAL)
