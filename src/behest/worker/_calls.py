"""One task run: its arguments checked and converted (pydantic), the function called (a sync
one in a thread), and what came of it made a result: text as is, anything else as JSON, an
exception as an error in plain words."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import BaseModel, ValidationError

from behest.worker._context import RetryableError, TaskContext, serving
from behest.worker._tools import WorkerTool

log = logging.getLogger("behest.worker")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a task's result says: the output, or with is_error what went wrong."""

    output: str
    is_error: bool = False
    retryable: bool = False


class _TimedOut(Exception):
    """An async tool ran past its timeout_s and was cancelled."""


async def run_task(tool: WorkerTool, arguments: str, context: TaskContext) -> Outcome:
    """Run `tool` on the task's arguments (JSON text); never raises but CancelledError."""
    try:
        values = tool.arguments_model.model_validate_json(arguments or "{}")
    except ValidationError as exc:
        return Outcome(f"invalid arguments: {invalid(exc)}", is_error=True)
    args, kwargs = _call_arguments(tool, values, context)
    try:
        with serving(context):
            value = await _call(tool, args, kwargs)
    except _TimedOut:
        log.warning("%s: timed out after %g s (execution %s)", tool.name, tool.timeout_s,
                    context.execution_id)  # fmt: skip
        return Outcome(f"{tool.name} timed out after {tool.timeout_s:g} s", is_error=True)
    except Exception as exc:
        return _failed(tool, context, exc)
    return _encoded(tool, value)


async def _call(tool: WorkerTool, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if tool.is_async:
        # An async tool is stopped at its timeout; a thread cannot be, so a sync one runs on.
        limit = asyncio.timeout(tool.timeout_s)
        try:
            async with limit:
                return await tool.function(*args, **kwargs)
        except TimeoutError:
            if limit.expired():
                raise _TimedOut from None
            raise  # the tool's own TimeoutError
    value = await _in_thread(tool.name, functools.partial(tool.function, *args, **kwargs))
    if inspect.isawaitable(value):  # a sync wrapper around a coroutine function
        value = await value
    return value


async def _in_thread(name: str, call: Callable[[], Any]) -> Any:
    return await start_thread(name, call)


def start_thread(
    name: str, call: Callable[[], Any], ended: Callable[[], None] | None = None
) -> asyncio.Future[Any]:
    """`call()` in a thread of its own, with this task's context variables; the future has
    what came of it, and `ended()` is called in the loop once it ends (whether or not anyone
    still waits). A daemon thread: one stuck in a tool does not keep the process from exiting
    after a stop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (context.run(call), None)
        except BaseException as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_settle, future, *outcome, ended)

    try:
        threading.Thread(target=target, name=f"behest-worker {name}", daemon=True).start()
    except BaseException:
        if ended is not None:
            ended()
        raise
    return future


def _settle(
    future: asyncio.Future[Any],
    value: Any,
    exc: BaseException | None,
    ended: Callable[[], None] | None,
) -> None:
    if ended is not None:
        ended()
    if future.done():  # cancelled: nobody waits for it
        return
    if exc is None:
        future.set_result(value)
    else:
        future.set_exception(exc)


def _call_arguments(
    tool: WorkerTool, values: BaseModel, context: TaskContext
) -> tuple[list[Any], dict[str, Any]]:
    """The function's positional and keyword arguments from the checked values."""
    given = [getattr(values, f"p{i}") for i in range(len(tool.parameters))]
    args = given[: tool.positional_only]
    kwargs = dict(
        zip(tool.parameters[tool.positional_only :], given[tool.positional_only :], strict=True)
    )
    if tool.context_parameter is not None:
        kwargs[tool.context_parameter] = context
    return args, kwargs


def _failed(tool: WorkerTool, context: TaskContext, exc: Exception) -> Outcome:
    retryable = isinstance(exc, RetryableError)
    if retryable:
        log.warning("%s: failed, retryable (execution %s): %s", tool.name,
                    context.execution_id, words(exc))  # fmt: skip
    else:
        log.warning("%s: failed (execution %s)", tool.name, context.execution_id, exc_info=exc)
    return Outcome(words(exc), is_error=True, retryable=retryable)


def words(exc: BaseException) -> str:
    """An exception's message, or its class's name when it has none (never a traceback)."""
    return str(exc).strip() or type(exc).__name__


def invalid(exc: ValidationError) -> str:
    """Pydantic's errors on one line: `where: what` for each."""
    found = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        found.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(found)


def _encoded(tool: WorkerTool, value: Any) -> Outcome:
    if isinstance(value, str):
        return Outcome(value)
    try:
        return Outcome(pydantic_core.to_json(value).decode())
    except pydantic_core.PydanticSerializationError as exc:
        log.warning("%s: its return value is not JSON: %s", tool.name, exc)
        return Outcome(
            f"{tool.name} returned a {type(value).__name__}, which cannot be written as JSON",
            is_error=True,
        )
