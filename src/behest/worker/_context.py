"""What a worker's tool knows of the task it serves (and how it asks the run's user a
question), what a tool's check answers, and the errors the SDK speaks in."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import grpc


class ElicitAction(enum.StrEnum):
    """How the user answered a task's question (MCP's elicitation actions)."""

    ACCEPT = "accept"  # answered: the content is the answer
    DECLINE = "decline"  # refused to answer
    CANCEL = "cancel"  # dismissed it, or nobody answered in time


class Reply(NamedTuple):
    """The answer to `TaskContext.ask`: the action, and with ACCEPT the content (a dict that
    fits the question's schema); `action, content = await context.ask(...)`."""

    action: ElicitAction
    content: dict[str, Any] | None = None


# Puts a running task's questions to the server (_questions.py Questions.ask).
Asker = Callable[["TaskContext", str, dict[str, Any]], Awaitable[Reply]]


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

    async def ask(self, message: str, schema: dict[str, Any]) -> Reply:
        """Ask the run's user `message` and wait for the answer; an accepted answer's content
        fits `schema` (a JSON Schema of an object, as a dict). The Reply's action is ACCEPT
        (with the content), DECLINE, or CANCEL (also: nobody answered in time: the question
        waits within the task's deadline). The run shows WAITING_FOR_INPUT meanwhile.

        A sync tool asks from its thread with `asyncio.run(context.ask(...))`. ValueError: a
        question the server does not ask (its words say why: an empty or long message, a
        schema that is not an object's); RuntimeError: this context's task does not run in
        this worker (a check's context, say)."""
        found = _askers.get(self.execution_id)
        if found is None:
            raise RuntimeError(f"{self.tool_name}: only a task running here asks the user")
        loop, asker = found
        if asyncio.get_running_loop() is loop:
            return await asker(self, message, schema)
        # Another loop (a sync tool's thread): the question goes out on the worker's.
        asked = asyncio.run_coroutine_threadsafe(_asked(asker, self, message, schema), loop)
        return await asyncio.wrap_future(asked)


async def _asked(asker: Asker, context: TaskContext, message: str, schema: Any) -> Reply:
    return await asker(context, message, schema)


_current: ContextVar[TaskContext | None] = ContextVar("behest_task_context", default=None)
# Who sends the questions of the tasks running now, by execution id, on the worker's loop.
_askers: dict[str, tuple[asyncio.AbstractEventLoop, Asker]] = {}


@contextlib.contextmanager
def asking(context: TaskContext, asker: Asker) -> Iterator[None]:
    """Inside the block, `context.ask` goes to `asker` (from any thread)."""
    _askers[context.execution_id] = (asyncio.get_running_loop(), asker)
    try:
        yield
    finally:
        _askers.pop(context.execution_id, None)


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
