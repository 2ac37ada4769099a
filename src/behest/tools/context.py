"""What a tool knows of the call it serves: the run, the call, the attempt, the deadline.

A tool asks for it by taking a second parameter, or one named `context`, in `__call__` (a
FunctionTool: in its function); the registry looks once, when the tool is added, and passes
a `ToolContext` (None when the caller gave none). Any tool, and any code it calls, may also
read it with `current_tool_context()`: the registry sets it around each call.

The idempotency key is the same for every attempt of one tool call — a call run again after a
crash or a lost claim — and differs for any other call: a tool whose side effect must happen
once hands it to its own backend (an Idempotency-Key header, a unique column). See
docs/TOOLS.md.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from behest.domain.executions import idempotency_key
from behest.domain.waits import ElicitAction, Reply

__all__ = ["ElicitAction", "Reply", "ToolContext", "current_tool_context", "idempotency_key"]

# Asks the run's user a question for a call (runs/asking.py Asking.ask).
Asker = Callable[["ToolContext", str, dict[str, Any]], Awaitable[Reply]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """One execution of one tool call.

    `execution_id` names this execution (a call run again gets a new one) and `attempt`
    counts them from 1; `idempotency_key` is the call's, the same at every attempt.
    `principal` is who created the run ("" when not known). `deadline` (UTC) is when the
    tool's timeout ends; the registry sets it as the call starts. `ask` puts a question to
    the run's user and waits for the answer (docs/SESSIONS.md, "Questions from tools").
    """

    execution_id: str
    attempt: int
    idempotency_key: str
    run_id: str
    session_id: str
    tenant: str
    principal: str
    call_id: str
    tool_name: str
    deadline: datetime | None = None

    async def ask(self, message: str, schema: dict[str, Any]) -> Reply:
        """Ask the run's user `message`; an accepted answer's content fits `schema` (a JSON
        Schema of an object). The call waits, durably, within its timeout: the Reply's
        action is ACCEPT (with the content), DECLINE, or CANCEL (also: nobody answered in
        time). ValueError: a question behest does not ask, saying why; RuntimeError: this
        call cannot ask (a check before a retry, say)."""
        asker = _askers.get(self.execution_id)
        if asker is None:
            raise RuntimeError(f"tool {self.tool_name!r} cannot ask the user here")
        return await asker(self, message, schema)


_current: ContextVar[ToolContext | None] = ContextVar("behest_tool_context", default=None)
# Who puts the questions of an execution running now to its run's user, by execution id.
_askers: dict[str, Asker] = {}


@contextlib.contextmanager
def asking(context: ToolContext, asker: Asker | None) -> Iterator[None]:
    """Inside the block, `context.ask` goes to `asker` (from any task: an MCP server's
    question arrives on its connection's)."""
    if asker is None:
        yield
        return
    _askers[context.execution_id] = asker
    try:
        yield
    finally:
        _askers.pop(context.execution_id, None)


def current_tool_context() -> ToolContext | None:
    """The context of the tool call being served (None outside one, or when none was given)."""
    return _current.get()


@contextlib.contextmanager
def serving(context: ToolContext | None) -> Iterator[None]:
    """`current_tool_context()` is `context` inside the block (tasks made in it copy it)."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


class Passing(Enum):
    """How a tool takes its context: not at all, as its second argument, or as `context=`."""

    NONE = "none"
    POSITIONAL = "positional"
    KEYWORD = "keyword"


def passing(function: Callable[..., Any]) -> Passing:
    """How `function` (a tool's bound `__call__`, or a FunctionTool's function) takes the
    context: a parameter named `context` takes it by keyword; else a second positional
    parameter without a default takes it positionally. `*args`, `**kwargs` and optional
    parameters of other names do not ask for it (wrappers and old tools stay as they were).
    """
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin, say)
        return Passing.NONE
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.name == "context" and p.kind in by_name for p in parameters[1:]):
        return Passing.KEYWORD
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) >= 2 and positional[1].default is inspect.Parameter.empty:
        return Passing.POSITIONAL
    return Passing.NONE


def call_with(
    function: Callable[..., Any],
    how: Passing,
    arguments: dict[str, Any],
    context: ToolContext | None,
) -> Any:
    """`function(arguments)`, with the context as `how` says."""
    if how is Passing.KEYWORD:
        return function(arguments, context=context)
    if how is Passing.POSITIONAL:
        return function(arguments, context)
    return function(arguments)
