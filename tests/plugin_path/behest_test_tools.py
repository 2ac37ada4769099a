"""A tool plugin for behest's tests (found through its entry point, not imported by tests)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, ClassVar

from behest.tools.base import FunctionTool, RetryableToolError, Tool, ToolResult, Verified
from behest.tools.context import ToolContext, current_tool_context
from behest.tools.sampling import SampledTurn, SamplingRefused, SamplingRequest

SECONDS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 30}},
    "required": ["seconds"],
    "additionalProperties": False,
}


async def _sleep(arguments: dict[str, Any]) -> str:
    await asyncio.sleep(arguments["seconds"])
    return f"slept {arguments['seconds']}"


async def _big(arguments: dict[str, Any]) -> str:
    return "x" * int(arguments["size"])


async def _explode(arguments: dict[str, Any]) -> str:
    raise RuntimeError("kaboom")


async def _not_text(arguments: dict[str, Any]) -> Any:
    return 42


async def _binary(arguments: dict[str, Any]) -> ToolResult:
    return ToolResult("\x7fELF\x00\x01")


# Calls of `flaky` so far, by its `key` argument (one process's count).
_FLAKY_CALLS: dict[str, int] = {}


async def _flaky(arguments: dict[str, Any]) -> str:
    """Fails with a retryable error `fail_times` times for one `key`, then answers."""
    key = arguments["key"]
    _FLAKY_CALLS[key] = _FLAKY_CALLS.get(key, 0) + 1
    if _FLAKY_CALLS[key] <= arguments["fail_times"]:
        raise RetryableToolError(f"the backend is busy (call {_FLAKY_CALLS[key]})")
    return f"done at call {_FLAKY_CALLS[key]}"


async def _check(arguments: dict[str, Any], context: ToolContext) -> Verified | None:
    """slow_checked's check: what its `check` argument says (ran, did_not_run, or unknown)."""
    said = arguments["check"]
    if said == "ran":
        return Verified(True, ToolResult(f"the backend says attempt {context.attempt} ran"))
    if said == "did_not_run":
        return Verified(False)
    return None


async def _sleep_once(arguments: dict[str, Any], context: ToolContext) -> str:
    """Sleeps at its first attempt only."""
    await asyncio.sleep(arguments["seconds"] if context.attempt == 1 else 0)
    return f"ran at attempt {context.attempt}"


def _described(context: ToolContext | None) -> str:
    """The context a tool was given as JSON, and whether current_tool_context() agrees."""
    fields = dataclasses.asdict(context) if context else {}
    if context and context.deadline:
        fields["deadline"] = context.deadline.isoformat()
    return json.dumps({**fields, "current_agrees": current_tool_context() == context})


class Whoami:
    """A class-style tool that takes its call's context as a second parameter."""

    name = "whoami"
    description = "Says what it knows of the call it serves."
    parameters_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    timeout_s = 5.0
    read_only = True
    concurrency_safe = True
    idempotent = True

    async def __call__(self, arguments: dict[str, Any], context: ToolContext | None) -> str:
        return _described(context)


async def _whoami(arguments: dict[str, Any], *, context: ToolContext | None = None) -> str:
    return _described(context)


NAME = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}},
    "required": ["name"],
}


async def _greet(arguments: dict[str, Any], context: ToolContext) -> str:
    """Asks the user's name (twice, if `twice`), then greets them."""
    names = []
    for _ in range(2 if arguments.get("twice") else 1):
        reply = await context.ask("What should I call you?", NAME)
        if reply.content is None:
            return f"no name given ({reply.action.name.lower()})"
        names.append(reply.content["name"])
    return "hello " + " and ".join(names)


async def _summarise(arguments: dict[str, Any], context: ToolContext) -> str:
    """Reports its progress over `parts` parts, then asks the run's model about the text."""
    parts = arguments["parts"]
    for part in range(1, parts + 1):
        await context.progress(part, parts, f"read part {part}")
    request = SamplingRequest(
        turns=(SampledTurn("user", arguments["text"]),), max_tokens=arguments.get("max_tokens", 50)
    )
    try:
        reply = await context.sample(request)
    except SamplingRefused as exc:
        return f"no summary: {exc}"
    return f"summary by {reply.model}: {reply.text} ({reply.stop_reason})"


def all_tools() -> list[Tool]:
    return [
        Whoami(),
        FunctionTool(
            name="greet",
            description="Asks the user's name, then greets them.",
            parameters_schema={"type": "object", "properties": {"twice": {"type": "boolean"}}},
            function=_greet,
            concurrency_safe=True,
        ),
        FunctionTool(
            name="whoami_too",
            description="Says what it knows of the call it serves (a function).",
            function=_whoami,
            timeout_s=7.0,
            read_only=True,
            concurrency_safe=True,
        ),
        FunctionTool(
            name="slow_safe",
            description="Sleeps; safe to run alongside others.",
            parameters_schema=SECONDS,
            function=_sleep,
            concurrency_safe=True,
            read_only=True,
        ),
        FunctionTool(
            name="slow_unsafe",
            description="Sleeps; must run alone.",
            parameters_schema=SECONDS,
            function=_sleep,
        ),
        FunctionTool(
            name="slow_idempotent",
            description="Sleeps; safe to run again after a crash.",
            parameters_schema=SECONDS,
            function=_sleep,
            idempotent=True,
        ),
        FunctionTool(
            name="big_output",
            description="Returns `size` characters.",
            parameters_schema={
                "type": "object",
                "properties": {"size": {"type": "integer", "minimum": 0}},
                "required": ["size"],
            },
            function=_big,
            concurrency_safe=True,
            idempotent=True,
        ),
        FunctionTool(name="explode", description="Always raises.", function=_explode),
        FunctionTool(
            name="too_slow",
            description="Sleeps past its timeout.",
            parameters_schema=SECONDS,
            function=_sleep,
            timeout_s=0.2,
        ),
        FunctionTool(name="not_text", description="Returns a number.", function=_not_text),
        FunctionTool(name="binary", description="Returns a NUL byte.", function=_binary),
        FunctionTool(
            name="flaky",
            description="Fails with a retryable error `fail_times` times, then answers.",
            parameters_schema={
                "type": "object",
                "properties": {"key": {"type": "string"}, "fail_times": {"type": "integer"}},
                "required": ["key", "fail_times"],
            },
            function=_flaky,
            idempotent=True,
        ),
        FunctionTool(
            name="slow_checked",
            description="Sleeps (its first attempt); not idempotent, but it has a check.",
            parameters_schema={
                "type": "object",
                "properties": {"seconds": {"type": "number"}, "check": {"type": "string"}},
                "required": ["seconds", "check"],
            },
            function=_sleep_once,
            verify=_check,
        ),
        FunctionTool(
            name="summarise",
            description="Reports progress over `parts`, then asks the run's model about `text`.",
            parameters_schema={
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "parts": {"type": "integer", "minimum": 0},
                    "max_tokens": {"type": "integer", "minimum": 1},
                },
                "required": ["text", "parts"],
            },
            function=_summarise,
        ),
        FunctionTool(
            name="guarded",
            description="Sleeps; every call needs an approval first.",
            parameters_schema=SECONDS,
            function=_sleep,
            requires_approval=True,
        ),
    ]
