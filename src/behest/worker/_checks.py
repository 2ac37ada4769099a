"""The checks of a worker's tools: a `verify` the server sends (did this execution, whose
outcome it does not know, run?) answered with a verdict. The tool's arguments are checked as
for a task, the check is called (a sync one in a thread) within the tool's timeout_s, and what
it says becomes the verdict; an exception, a timeout or an answer it cannot read become "cannot
tell". Checks have slots of their own (max_tasks, beside the tasks'): a sync check past its
time runs on in its thread, holding its slot until it ends."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic_core
from pydantic import BaseModel, ValidationError

from behest.worker._calls import invalid, start_thread, words
from behest.worker._context import TaskContext, Verified, serving
from behest.worker._tools import Check, WorkerTool

log = logging.getLogger("behest.worker")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verify's answer: `known` False, the worker cannot tell; else it `ran` (with its
    `output`, an error when `is_error`) or it did not."""

    known: bool
    ran: bool = False
    output: str = ""
    is_error: bool = False


UNKNOWN = Verdict(known=False)
DID_NOT_RUN = Verdict(known=True, ran=False)


class Checks:
    """The tools' checks, at most `max_checks` running at once (across streams)."""

    def __init__(self, tools: Mapping[str, WorkerTool], max_checks: int) -> None:
        self._tools = tools
        self._slots = asyncio.Semaphore(max_checks)

    async def verdict(self, context: TaskContext, arguments: str) -> Verdict:
        """What the check of `context.tool_name` says of the execution `context` names (its
        arguments: JSON text); never raises but CancelledError."""
        tool = self._tools.get(context.tool_name)
        if tool is None or tool.check is None:
            log.warning("verify of %s: this worker has no check of a tool %r: cannot tell",
                        context.execution_id, context.tool_name)  # fmt: skip
            return UNKNOWN
        try:
            values = tool.arguments_model.model_validate_json(arguments or "{}")
        except ValidationError as exc:
            log.warning("%s: verify of %s with invalid arguments (%s): cannot tell", tool.name,
                        context.execution_id, invalid(exc))  # fmt: skip
            return UNKNOWN
        # The server waits for the verdict this long from now (the time a slot takes too).
        deadline = datetime.now(UTC) + timedelta(seconds=tool.timeout_s)
        context = dataclasses.replace(context, deadline=deadline)
        limit = asyncio.timeout(tool.timeout_s)
        try:
            async with limit:
                said = await self._call(tool, tool.check, values, context)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and limit.expired():
                log.warning("%s: its check of %s took more than %g s: cannot tell", tool.name,
                            context.execution_id, tool.timeout_s)  # fmt: skip
            else:
                log.warning("%s: its check of %s failed: cannot tell", tool.name,
                            context.execution_id, exc_info=exc)  # fmt: skip
            return UNKNOWN
        verdict = _verdict_of(tool, said)
        log.info("%s: execution %s (attempt %d) %s", tool.name, context.execution_id,
                 context.attempt, _told(verdict))  # fmt: skip
        return verdict

    async def _call(
        self, tool: WorkerTool, check: Check, values: BaseModel, context: TaskContext
    ) -> Any:
        named = {name: getattr(values, f"p{i}") for i, name in enumerate(tool.parameters)}
        args = [named[name] for name in check.positional]
        kwargs: dict[str, Any] = {name: named[name] for name in check.keywords}
        if check.context_parameter is not None:
            kwargs[check.context_parameter] = context
        call = functools.partial(check.function, *args, **kwargs)
        await self._slots.acquire()
        with serving(context):
            if check.is_async:
                try:
                    return await call()
                finally:
                    self._slots.release()
            # A thread cannot be stopped: its slot is given back when it ends.
            value = await start_thread(f"{tool.name} check", call, self._slots.release)
            if inspect.isawaitable(value):  # a sync wrapper around a coroutine function
                value = await value
            return value


def _verdict_of(tool: WorkerTool, said: Any) -> Verdict:
    """The verdict a check's return value says: True, False, None or a Verified."""
    if said is None:
        return UNKNOWN
    if isinstance(said, bool):
        said = Verified(ran=said)
    if not isinstance(said, Verified):
        log.warning("%s: its check returned a %s, not True, False, None or a Verified: "
                    "cannot tell", tool.name, type(said).__name__)  # fmt: skip
        return UNKNOWN
    if not said.ran:
        return DID_NOT_RUN
    output = said.output
    if output is None:
        return Verdict(known=True, ran=True, output=f"{tool.name} ran; its output is not known")
    if not isinstance(output, str):
        try:
            output = pydantic_core.to_json(output).decode()
        except pydantic_core.PydanticSerializationError as exc:
            log.warning("%s: its check's output is not JSON: %s; cannot tell", tool.name,
                        words(exc))  # fmt: skip
            return UNKNOWN
    return Verdict(known=True, ran=True, output=output, is_error=bool(said.is_error))


def _told(verdict: Verdict) -> str:
    if not verdict.known:
        return "is not known to its check"
    if not verdict.ran:
        return "did not run, says its check"
    return "ran, says its check" + (" (an error)" if verdict.is_error else "")
