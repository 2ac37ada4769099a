"""All tools behest can run, by name, and the one place a tool call is validated and run."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from behest import bounded_json
from behest.domain.messages import ToolCall, ToolDefinition
from behest.errors import describe
from behest.tools.base import RetryableToolError, Tool, ToolPolicy, ToolResult
from behest.tools.context import Passing, ToolContext, call_with, passing, serving
from behest.tools.output import truncate

# A tool call's arguments, as a model sends them; more is an error result, not a parse.
MAX_ARGUMENT_BYTES = 1024 * 1024
# Argument validators kept, one per schema (the registry's tools, client tools, spawn_agent).
VALIDATORS_KEPT = 1024
_ONE_ATTEMPT = ToolPolicy()
# Where a tool came from (ToolRegistry.source).
BUILTIN, PLUGIN, MCP, WORKER = "builtin", "plugin", "mcp", "worker"


class ToolRegistry:
    """Tools by name; `execute` turns every failure into an error result the model sees.

    Each tool is registered with where it came from (`source`): the tools given to the
    constructor are the built-in ones; `add` takes "plugin" (the default) or "mcp". A view
    may also know tools that are unavailable now, each with why (`with_unavailable`: the
    tools of an MCP server that is down): they are not among `names()` nor found by `get`,
    and a call of one is an error result that says why.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        source: str = BUILTIN,
        approval_required: Iterable[str] = (),
        policies: Mapping[str, ToolPolicy] | None = None,
    ) -> None:
        """`approval_required`: names of tools whose every call needs an approval (the
        settings' approval_required_tools), besides those whose definition asks for one;
        `policies`: how the named tools' calls are retried and bounded ([tool_policies])."""
        self._approval_required = frozenset(approval_required)
        self._policies = dict(policies or {})
        self._tools: dict[str, Tool] = {}
        self._sources: dict[str, str] = {}
        # Each tool's schema as the validator cache's key, made once (not per call).
        self._schema_keys: dict[str, str] = {}
        # How each tool takes its call's context (tools/context.py), found once.
        self._passing: dict[str, Passing] = {}
        # Known tools that are unavailable now: name → (tool, why).
        self._down: dict[str, tuple[Tool, str]] = {}
        for tool in tools:
            self.add(tool, source=source)

    def add(self, tool: Tool, *, source: str = PLUGIN) -> None:
        """Register a tool; its schema must be valid JSON Schema and its name unique."""
        if tool.name in self._tools:
            raise ValueError(f"two tools are named {tool.name!r}")
        try:
            Draft202012Validator.check_schema(tool.parameters_schema)
        except SchemaError as exc:
            raise ValueError(f"tool {tool.name!r} has an invalid schema: {exc.message}") from None
        self._tools[tool.name] = tool
        self._sources[tool.name] = source
        self._schema_keys[tool.name] = _key(tool.parameters_schema)
        self._passing[tool.name] = passing(tool.__call__)

    def with_tools(self, tools: Iterable[Tool], *, source: str) -> ToolRegistry:
        """This registry's tools and `tools` (from `source`) beside them, as a new registry:
        a run's view with its tenant's worker tools. A name this one has is left out."""
        view = self._copy()
        for tool in tools:
            if tool.name not in self._tools and tool.name not in self._down:
                view.add(tool, source=source)
        return view

    def with_unavailable(self, tools: Iterable[tuple[Tool, str]], *, source: str) -> ToolRegistry:
        """This registry with `tools` (from `source`) known but unavailable, each with why, as
        a new registry. A name this one has is left out."""
        view = self._copy()
        for tool, why in tools:
            if tool.name not in self._tools and tool.name not in self._down:
                view._down[tool.name] = (tool, why)
                view._sources[tool.name] = source
        return view

    def _copy(self) -> ToolRegistry:
        view = copy.copy(self)
        view._tools, view._sources = dict(self._tools), dict(self._sources)
        view._schema_keys, view._passing = dict(self._schema_keys), dict(self._passing)
        view._down = dict(self._down)
        return view

    def unavailable(self) -> dict[str, tuple[Tool, str]]:
        """The tools known but unavailable now, by name: each tool and why."""
        return dict(self._down)

    def arguments_of(self, call: ToolCall) -> tuple[dict[str, Any], str]:
        """A registered tool's call arguments, checked against its schema; or why not."""
        if call.name not in self._tools:
            return {}, f"tool {call.name!r} not found"
        return self._arguments(call)

    def policy(self, name: str) -> ToolPolicy:
        """How the tool's calls are retried (the default: one attempt)."""
        return self._policies.get(name, _ONE_ATTEMPT)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def source(self, name: str) -> str:
        """Where the tool came from: "builtin", "plugin" or "mcp" ("" if unknown); an
        unavailable tool's too."""
        return self._sources.get(name, "")

    def definitions(self, names: Iterable[str] | None = None) -> list[ToolDefinition]:
        """Tools as offered to a model: all of them, or the named ones."""
        chosen = self.names() if names is None else names
        return [
            ToolDefinition(t.name, t.description, t.parameters_schema)
            for t in (self._tools[n] for n in chosen if n in self._tools)
        ]

    async def execute(self, call: ToolCall, context: ToolContext | None = None) -> ToolResult:
        """Validate the call's arguments against the tool's schema, run it, bound its output.

        `context` (its deadline set here, from the tool's timeout) goes to a tool that takes
        it, and is `current_tool_context()` while the tool runs; None gives no context."""
        tool = self._tools.get(call.name)
        if tool is None:
            if call.name in self._down:
                why = self._down[call.name][1]
                return ToolResult(f"tool {call.name!r} is unavailable: {why}", is_error=True)
            known = ", ".join(self.names()) or "none"
            return ToolResult(f"tool {call.name!r} not found (available: {known})", is_error=True)
        arguments, problem = self._arguments(call)
        if problem:
            return ToolResult(problem, is_error=True)
        timeout_s = self.policy(call.name).timeout_s or tool.timeout_s
        if context is not None:
            deadline = datetime.now(UTC) + timedelta(seconds=timeout_s)
            context = dataclasses.replace(context, deadline=deadline)
        try:
            with serving(context):
                running = call_with(tool, self._passing[call.name], arguments, context)
                result = await asyncio.wait_for(running, timeout_s)
        except TimeoutError:
            return ToolResult(f"tool {call.name!r} timed out after {timeout_s:g} s", True)
        except RetryableToolError as exc:
            return ToolResult(f"tool {call.name!r} failed: {describe(exc)}", True, retryable=True)
        except Exception as exc:  # a tool's crash is the model's to react to, not the run's
            return ToolResult(f"tool {call.name!r} failed: {describe(exc)}", True)
        if isinstance(result, str):
            result = ToolResult(result)
        if not isinstance(result, ToolResult) or not isinstance(result.text, str):
            return ToolResult(f"tool {call.name!r} returned invalid output (not text)", True)
        retryable = result.is_error and result.retryable
        return ToolResult(truncate(result.text), result.is_error, retryable)

    def _arguments(self, call: ToolCall) -> tuple[dict[str, Any], str]:
        return _check(call, _validator(self._schema_keys[call.name]))

    @staticmethod
    def check_against(call: ToolCall, schema: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """A call's arguments parsed (bounded) and checked against `schema` — a registered
        tool's, a client tool's, spawn_agent's — whose validator is made once (one cache)."""
        return _check(call, _validator(_key(schema)))

    @staticmethod
    def check_value(
        what: str, value: Any, schema: dict[str, Any], against: str = "its output schema"
    ) -> str:
        """Why `value` does not fit `schema` ("" when it does): a worker tool's output against
        its output schema, an answer against its question's; with the one validator cache."""
        errors = sorted(_validator(_key(schema)).iter_errors(value), key=str)
        if not errors:
            return ""
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        return f"{what} does not match {against} at {where}: {errors[0].message}"

    def unsupported(self, name: str) -> str:
        """Why the tool is not offered to models ("" when it is): it needs something behest
        does not do (an MCP tool that requires task-augmented execution). ListTools shows it."""
        return str(getattr(self._tools.get(name), "unsupported", "") or "")

    def requires_approval(self, name: str) -> bool:
        """Whether every call of the tool needs an approval: its definition or the settings
        say so (a run may ask for more: runs/waiting.py)."""
        if name in self._approval_required:
            return True
        tool = self._tools.get(name) or self._down.get(name, (None, ""))[0]
        return bool(getattr(tool, "requires_approval", False))


def _key(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True)


@functools.lru_cache(maxsize=VALIDATORS_KEPT)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def _check(call: ToolCall, validator: Draft202012Validator) -> tuple[dict[str, Any], str]:
    """A call's arguments parsed (bounded) and checked by `validator`; or why not."""
    try:
        arguments = bounded_json.parse(call.arguments or "{}", max_bytes=MAX_ARGUMENT_BYTES)
    except bounded_json.JsonRefused as exc:
        return {}, f"the arguments of {call.name!r} were refused: the JSON text {exc}"
    if not isinstance(arguments, dict):
        return {}, f"arguments of {call.name!r} must be a JSON object"
    errors = sorted(validator.iter_errors(arguments), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        return {}, (
            f"arguments of {call.name!r} do not match its schema at {where}: {errors[0].message}"
        )
    return arguments, ""
