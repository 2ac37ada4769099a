"""What a tool knows of the call it serves: the run, the call, the attempt, the deadline.

A tool asks for it by taking a second parameter, or one named `context`, in `__call__` (a
FunctionTool: in its function); the registry looks once, when the tool is added, and passes
a `ToolContext` (None when the caller gave none). Any tool, and any code it calls, may also
read it with `current_tool_context()`: the registry sets it around each call.

Through its context a tool reaches its run (the run's side, registered per execution by
runs/tool_calls.py): it asks the run's user a question, tells how far it got, or asks the
run's model for an answer. An MCP server's requests and notifications during a call come the
same way (tools/mcp_elicit.py, mcp_progress.py, mcp_sampling.py).

The idempotency key is the same for every attempt of one tool call — a call run again after a
crash or a lost claim — and differs for any other call: a tool whose side effect must happen
once hands it to its own backend (an Idempotency-Key header, a unique column). See
docs/TOOLS.md.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from behest.domain.executions import idempotency_key
from behest.domain.waits import ElicitAction, Reply
from behest.tools.sampling import SamplingReply, SamplingRequest

__all__ = [
    "ElicitAction",
    "Reply",
    "RunSide",
    "SamplingReply",
    "SamplingRequest",
    "ToolContext",
    "current_tool_context",
    "idempotency_key",
]

# A progress message is cut to this many characters (it goes into the run's log).
MAX_PROGRESS_MESSAGE_CHARS = 1000


class RunSide(Protocol):
    """What a run does for its running tools (runs/tool_side.py)."""

    async def ask(self, context: ToolContext, message: str, schema: dict[str, Any]) -> Reply:
        """Put a question to the run's user (runs/asking.py)."""
        ...

    async def progress(
        self, context: ToolContext, done: float, total: float | None, message: str
    ) -> None:
        """Tell the run's log how far the call got (runs/tool_progress.py)."""
        ...

    async def sample(self, context: ToolContext, request: SamplingRequest) -> SamplingReply:
        """Answer with the run's model (runs/sampling.py)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """One execution of one tool call.

    `execution_id` names this execution (a call run again gets a new one) and `attempt`
    counts them from 1; `idempotency_key` is the call's, the same at every attempt.
    `principal` is who created the run ("" when not known). `deadline` (UTC) is when the
    tool's timeout ends; the registry sets it as the call starts. `ask` puts a question to
    the run's user and waits for the answer (docs/SESSIONS.md, "Questions from tools");
    `progress` tells the run how far the call got; `sample` asks the run's model.
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
        return await self._side().ask(self, message, schema)

    async def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Tell the run how far the call got: `done` of `total` (None: unknown), in the
        tool's own units, with an optional message. The run's log shows it as tool_progress
        events, at most one every half second per call and the last one before the result
        always. ValueError: a number that is not finite; RuntimeError: this call cannot
        report (outside a run)."""
        if not math.isfinite(done) or (total is not None and not math.isfinite(total)):
            raise ValueError("progress and total must be finite numbers")
        await self._side().progress(self, done, total, message[:MAX_PROGRESS_MESSAGE_CHARS])

    async def sample(self, request: SamplingRequest) -> SamplingReply:
        """Ask the run's own model (its provider and model, no tools) to answer `request`;
        the tokens count in the run's usage and budgets. SamplingRefused
        (tools/sampling.py): behest did not answer, saying why; RuntimeError: this call
        cannot sample (outside a run)."""
        return await self._side().sample(self, request.checked())

    def _side(self) -> RunSide:
        side = _sides.get(self.execution_id)
        if side is None:
            raise RuntimeError(f"tool {self.tool_name!r} cannot reach its run here")
        return side


_current: ContextVar[ToolContext | None] = ContextVar("behest_tool_context", default=None)
# The runs of the executions running now, by execution id: who answers their tools.
_sides: dict[str, RunSide] = {}


@contextlib.contextmanager
def run_side(context: ToolContext, side: RunSide | None) -> Iterator[None]:
    """Inside the block, `context.ask`, `progress` and `sample` go to `side` (from any task:
    an MCP server's requests arrive on its connection's)."""
    if side is None:
        yield
        return
    _sides[context.execution_id] = side
    try:
        yield
    finally:
        _sides.pop(context.execution_id, None)


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
