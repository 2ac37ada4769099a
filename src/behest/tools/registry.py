"""All tools behest can run, by name, and the one place a tool call is executed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

from behest.domain.messages import ToolCall
from behest.providers.base import ToolDefinition
from behest.tools.base import Tool, ToolResult


class ToolRegistry:
    """Tools by name; `execute` turns every failure into an error result the model sees."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def definitions(self, names: Iterable[str] | None = None) -> list[ToolDefinition]:
        chosen = self._tools.values() if names is None else (self._tools[n] for n in names)
        return [ToolDefinition(t.name, t.description, t.parameters_schema) for t in chosen]

    async def execute(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self.names()) or "none"
            return ToolResult(f"tool {call.name!r} not found (available: {known})", is_error=True)
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolResult(f"arguments are not valid JSON: {exc}", is_error=True)
        if not isinstance(arguments, dict):
            return ToolResult("arguments must be a JSON object", is_error=True)
        try:
            return await asyncio.wait_for(tool(arguments), tool.timeout_s)
        except TimeoutError:
            return ToolResult(f"tool {call.name!r} timed out after {tool.timeout_s:g} s", True)
        except Exception as exc:  # a tool's crash is the model's problem to react to
            return ToolResult(f"tool {call.name!r} failed: {type(exc).__name__}: {exc}", True)
