"""The Tool protocol: JSON Schema in, text out, with a timeout and safety flags.

A tool may also take the context of its call (tools/context.py): `__call__(self, arguments,
context: ToolContext | None = None)`, or a FunctionTool's function with a second parameter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from behest.tools.context import Passing, ToolContext, call_with, passing

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model sees of a tool call; `is_error` marks failures it should react to, and
    `retryable` an error worth another attempt (made when the tool's policy allows one:
    [tool_policies.NAME] max_attempts; the model then sees only the last attempt's result)."""

    text: str
    is_error: bool = False
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class Verified:
    """A tool's own check of an execution whose outcome was unknown (behest stopped while
    it ran): it ran, with `result` as the model is to see it, or it did not (it runs again).
    A check that cannot tell returns None: a person decides (ReconcileToolExecution)."""

    ran: bool
    result: ToolResult | None = None


# A tool's check (an optional `verify` of a tool): the call's arguments and the context of
# the execution in question (its execution id, attempt and idempotency key).
Verify = Callable[[dict[str, Any], ToolContext], Awaitable[Verified | None]]


class RetryableToolError(Exception):
    """Raised by a tool: an error result that is worth another attempt (ToolResult.retryable)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPolicy:
    """How a tool's calls are retried: at most `max_attempts` executions of one call, the
    next after a backoff (backoff.py: full jitter from `backoff_initial_s`, capped at
    `backoff_max_s`); `timeout_s` (0: the tool's own) bounds each attempt."""

    max_attempts: int = 1
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    timeout_s: float = 0.0


@runtime_checkable
class Tool(Protocol):
    """A callable tool. Flags tell the loop what it may do with it:
    `concurrency_safe` calls of one batch may run in parallel; an `idempotent` call may be
    re-run after a crash; `read_only` tools change nothing outside behest.

    `__call__` may take a second parameter (or one named `context`): the call's ToolContext,
    or None when the caller gave none. A tool that does not take it is called as before.
    """

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters_schema(self) -> dict[str, Any]: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def concurrency_safe(self) -> bool: ...
    @property
    def idempotent(self) -> bool: ...

    async def __call__(self, arguments: dict[str, Any]) -> ToolResult | str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionTool:
    """A Tool made from an async function of the validated arguments, and of the call's
    ToolContext when the function takes a second parameter (or one named `context`)."""

    name: str
    description: str
    parameters_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    # (arguments) or (arguments, context): see tools/context.py `passing`.
    function: Callable[..., Awaitable[ToolResult | str]]
    timeout_s: float = DEFAULT_TIMEOUT_S
    read_only: bool = False
    concurrency_safe: bool = False
    idempotent: bool = False
    # Every call waits for an approval (SubmitApprovals) before it runs. Not part of the
    # Tool protocol: a tool without the attribute needs none unless the settings say so.
    requires_approval: bool = False
    # Asked first when an execution's outcome is unknown (Verified). Not part of the Tool
    # protocol either: a tool without one leaves the question to a person.
    verify: Verify | None = None
    # Why behest does not offer it to models ("" when it does: tools/registry.py
    # `unsupported`). Not part of the Tool protocol either.
    unsupported: str = ""
    # How the function takes the context: looked up once, not at every call.
    _passing: Passing = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_passing", passing(self.function))

    async def __call__(
        self, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> ToolResult | str:
        result: ToolResult | str = await call_with(self.function, self._passing, arguments, context)
        return result
