"""The writes the event log commits together in one transaction, and a batch's outcomes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from behest.domain.events import Event
from behest.domain.executions import ToolExecution, Transition
from behest.domain.messages import Message
from behest.domain.runs import CreatedRun, FinishReason, Run, RunRequest, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import FailureCode, Money, TokenUsage
from behest.domain.waits import PendingCall
from behest.domain.workers import Task


@dataclass(frozen=True, slots=True)
class AppendEvent:
    event: Event


@dataclass(frozen=True, slots=True)
class AppendMessage:
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateRun:
    """Sets the run's progress; a terminal status also frees its session."""

    run_id: str
    status: RunStatus
    iterations: int
    usage: TokenUsage
    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    error: str = ""
    failure_code: FailureCode = FailureCode.UNSPECIFIED
    # What the run cost so far (None: its model has no prices).
    cost: Money | None = None


@dataclass(frozen=True, slots=True)
class SetRunOutput:
    """Stores a run's final answer that fitted its response format (compact JSON text)."""

    run_id: str
    output: str


@dataclass(frozen=True, slots=True)
class SetRunAgent:
    """A handoff: the run goes on under another agent it may reach (its pins)."""

    run_id: str
    agent: str


@dataclass(frozen=True, slots=True)
class TakeSteers:
    """Steers (domain/runs.py Steer) joined their run's transcript, with this step."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CloseSteering:
    """The run is ending: it takes no more steers (a steer stored from now on is refused)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class PutSnapshot:
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class DeleteSnapshot:
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearToolResults:
    """Prune: replace the text of the session's tool results up to a position."""

    session_id: str
    through_position: int
    text: str


@dataclass(frozen=True, slots=True)
class RequestInput:
    """Store the calls a run now waits for (unanswered), with the step that pauses it."""

    calls: tuple[PendingCall, ...]


@dataclass(frozen=True, slots=True)
class ReleaseRun:
    """The run's owner lets go of it (no owner, no lease): a waiting run is nobody's."""

    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireCalls:
    """Mark a run's unanswered calls that expired as timed out (by the run that goes on)."""

    run_id: str
    call_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordExecution:
    """A tool execution's record as it now is, and the transition that made it so."""

    execution: ToolExecution
    transition: Transition


@dataclass(frozen=True, slots=True)
class EnqueueTask:
    """A worker tool's call queued for a worker, with the step that starts its execution."""

    task: Task


@dataclass(frozen=True, slots=True)
class Fence:
    """The step holding this write is the run's only under the claim `generation`: checked in
    the step's own transaction, so the step of a node that lost the run writes nothing."""

    run_id: str
    generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRun:
    """A run to create inside a group commit, with the writes of its first step: the one way
    to create a run (`Store.apply_batch`, which `EventLog.create` feeds).

    The run is created in status SESSION_LOADED, with a new session unless
    `request.session_id` names one, claimed by `owner` (none if empty) until `lease_until`.
    `first_step(run, position)` is called in the transaction once the run exists, with the
    session's next free message position; its writes commit with the creation. A
    `request.client_request_id` already used in `tenant` creates nothing: the outcome is the
    run it named (or AlreadyExists if that run's request differs), and `first_step` is not
    called. `refused_if_new`, when set, says there is no room for a new run (its text is the
    ResourceExhausted the creation is refused with, unless the key names a run already).
    """

    request: RunRequest
    run_id: str
    tenant: str
    now: datetime
    traceparent: str
    owner: str
    lease_until: datetime | None
    first_step: Callable[[Run, int], list[Write]]
    refused_if_new: str = ""


Write = (
    AppendEvent
    | AppendMessage
    | UpdateRun
    | SetRunOutput
    | SetRunAgent
    | TakeSteers
    | CloseSteering
    | PutSnapshot
    | DeleteSnapshot
    | ClearToolResults
    | RequestInput
    | ReleaseRun
    | ExpireCalls
    | RecordExecution
    | EnqueueTask
    | Fence
)


# Per item of apply_batch: None for plain writes; for a NewRun the CreatedRun and the writes of
# its first step (none when the key named an existing run), or the error that refused it.
BatchResult = tuple[CreatedRun, list[Write]] | BaseException | None
