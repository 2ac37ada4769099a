"""Workers: processes outside behest that serve tools (agent.v1.WorkerService), and the
durable tasks they run.

A worker connects (to any replica), declares its tools and receives tasks: one per
execution of a worker tool's call (domain/executions.py), written with the run's step that
starts it. A task is QUEUED until a worker of the run's tenant that serves the tool takes it
(LEASED: the lease renewed by the worker's heartbeats), and DONE once one result of its attempt
is accepted, or once behest gave up on it (no worker took it in time: `expired`).

A running task may ask the run's user questions (TaskQuestion, numbered by the task): each is
stored against the task by the worker's replica, put to the user by the run's (which waits
for the task), and its answer (TaskAnswer) stored back for the worker's replica to send.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from behest.domain.waits import ElicitAction

# Defaults of a worker tool's declaration (0 in WorkerToolSpec).
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_SCHEDULE_TIMEOUT_S = 60.0
# The most questions one task may ask.
MAX_TASK_QUESTIONS = 100


class TaskState(enum.IntEnum):
    QUEUED = 1
    LEASED = 2
    DONE = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerToolSpec:
    """A tool as a worker declares it (checked: api/worker_hello.py)."""

    name: str
    description: str
    parameters_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    idempotent: bool = False
    read_only: bool = False
    concurrency_safe: bool = False
    requires_approval: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    schedule_timeout_s: float = DEFAULT_SCHEDULE_TIMEOUT_S
    max_attempts: int = 1
    # The worker answers a verify for this tool (whether an execution whose outcome is
    # unknown ran), asked before a person is.
    verifiable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHello:
    """What a worker says as it connects (checked)."""

    name: str
    tools: tuple[WorkerToolSpec, ...]
    max_tasks: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRecord:
    """A worker's connection, as stored: who, where, what it serves."""

    id: str
    tenant: str
    name: str
    node: str
    tools: tuple[WorkerToolSpec, ...]
    max_tasks: int
    connected_at: datetime
    seen_at: datetime

    @property
    def actor(self) -> str:
        """How execution records name it."""
        return f"worker {self.id} ({self.name})" if self.name else f"worker {self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One execution of a worker tool's call, for a worker to run."""

    execution_id: str
    attempt: int
    run_id: str
    session_id: str
    tenant: str
    call_id: str
    tool_name: str
    arguments: str
    idempotency_key: str
    created_at: datetime
    # When a worker must have taken it, and how long it may then run.
    schedule_deadline: datetime
    timeout_s: float
    state: TaskState = TaskState.QUEUED
    worker_id: str = ""
    worker_name: str = ""  # a reconnection of the same worker takes its leased tasks over
    lease_until: datetime | None = None
    deadline: datetime | None = None  # start to close, set when leased
    output: str = ""
    is_error: bool = False
    retryable: bool = False
    # DONE without a result: no worker took it before schedule_deadline.
    expired: bool = False
    # How many questions it asked (TaskQuestion): the run's side looks for new ones when
    # this grows.
    questions: int = 0


@dataclass(frozen=True, slots=True)
class TaskResult:
    """A worker's outcome of one attempt of a task."""

    execution_id: str
    attempt: int
    output: str
    is_error: bool = False
    retryable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyRequest:
    """Asked of a worker: did this execution of a verifiable tool's call run?"""

    execution_id: str
    attempt: int
    idempotency_key: str
    tool_name: str
    arguments: str
    run_id: str
    call_id: str


@dataclass(frozen=True, slots=True)
class WorkerVerdict:
    """A worker's answer to a VerifyRequest: `known` False: it cannot tell."""

    execution_id: str
    attempt: int
    known: bool
    ran: bool = False
    output: str = ""
    is_error: bool = False


class ResultRefused(enum.Enum):
    """Why a worker's result was not taken (nothing changed)."""

    UNKNOWN = "no such task"
    STALE = "the result is of another attempt"
    TWICE = "the task already has its result"
    NOT_YOURS = "the task is not leased to this worker (its lease was lost)"


@dataclass(frozen=True, slots=True)
class TaskQuestion:
    """A question a running task asks the run's user: `number` counts the task's questions
    from 1 (with the execution id, its name: asked again, it is the same question);
    `schema` is the JSON Schema of the answer's content, as the JSON text the worker sent."""

    execution_id: str
    number: int
    message: str
    schema: str


@dataclass(frozen=True, slots=True)
class TaskAnswer:
    """The answer to a TaskQuestion: an action (with ACCEPT, `content` is the JSON object
    the user gave, as JSON text), or `error`: the question was not asked, and why."""

    execution_id: str
    number: int
    action: ElicitAction | None = None
    content: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredQuestion:
    """A task's question as stored: what was asked, and its answer once the run's side gave
    one (None until then)."""

    question: TaskQuestion
    run_id: str
    asked_at: datetime
    answer: TaskAnswer | None = None


class QuestionRefused(enum.Enum):
    """Why a task's question was not stored (nothing changed)."""

    UNKNOWN = "no such task"
    NOT_YOURS = "the task is not leased to this worker (its lease was lost, or it has ended)"
    ANOTHER = "the task asked another question under this number"
    TOO_MANY = f"the task asked {MAX_TASK_QUESTIONS} questions, the most a task may"
