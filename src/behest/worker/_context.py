"""What a worker's tool knows of the task it serves, what a tool's check answers, and the
errors the SDK speaks in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    """One task: one execution of one tool call, as the server sent it.

    `execution_id` names this execution (a call run again gets a new one) and `attempt`
    counts them from 1; `idempotency_key` is the call's, the same at every attempt: hand it to
    the backend whose side effect must happen once. `deadline` (UTC) is when the server stops
    waiting for the result (None if it sent none); `worker_id` is the id the server gave the
    connection the task came on.
    """

    execution_id: str
    attempt: int
    idempotency_key: str
    tool_name: str
    run_id: str
    session_id: str
    call_id: str
    deadline: datetime | None = None
    worker_id: str = ""


_current: ContextVar[TaskContext | None] = ContextVar("behest_task_context", default=None)


def current_task_context() -> TaskContext | None:
    """The context of the task being served (None outside one): for code deep inside a tool
    that has no parameter for it."""
    return _current.get()


@contextlib.contextmanager
def serving(context: TaskContext) -> Iterator[None]:
    """`current_task_context()` is `context` inside the block (threads started by the SDK
    for sync tools copy it)."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


@dataclass(frozen=True, slots=True)
class Verified:
    """What a tool's check (`@worker.tool(verify=...)`) says of an execution whose outcome is
    unknown: it ran (`ran=True`), `output` its result as the tool would have returned it (text
    as is, anything else as JSON; None: not known, and the model is told so), an error result
    with `is_error`; or it did not run (`ran=False`, the output ignored: the server runs the
    call again). A check may return True or False for these without an output, and None when
    it cannot tell."""

    ran: bool
    output: Any = None
    is_error: bool = False


class RetryableError(Exception):
    """Raised by a tool: the call failed but may be tried again (a retryable error result; the
    server tries again only as far as the tool's `max_attempts` allows)."""


class WorkerError(Exception):
    """The server refused the worker (a bad hello, a bad token, a worker role it lacks), or the
    reconnect attempts ran out. `code` is the gRPC status, `message` the server's words."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
