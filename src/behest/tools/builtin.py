"""Built-in tools that are safe on a server: current_time, calculator, read_file."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from behest.tools.base import FunctionTool, Tool, ToolResult
from behest.tools.calculator import CalculationError, evaluate, format_value

READ_FILE_MAX_BYTES = 1024 * 1024


async def _current_time(arguments: dict[str, Any]) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def _calculator(arguments: dict[str, Any]) -> ToolResult:
    try:
        return ToolResult(format_value(evaluate(arguments["expression"])))
    except CalculationError as exc:
        return ToolResult(str(exc), is_error=True)


def current_time() -> Tool:
    return FunctionTool(
        name="current_time",
        description="The current date and time in UTC, ISO 8601.",
        parameters_schema={"type": "object", "properties": {}, "additionalProperties": False},
        function=_current_time,
        read_only=True,
        concurrency_safe=True,
        idempotent=False,
    )


def calculator() -> Tool:
    return FunctionTool(
        name="calculator",
        description=(
            "Exact arithmetic: numbers, + - * / // % ** and parentheses, e.g. '(1 + 2) / 3'."
        ),
        parameters_schema={
            "type": "object",
            "properties": {"expression": {"type": "string", "minLength": 1}},
            "required": ["expression"],
            "additionalProperties": False,
        },
        function=_calculator,
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
    )


def read_file(root: Path) -> Tool:
    """Reads UTF-8 text files below `root`; nothing outside it, symlinks included."""
    base = root.resolve()

    async def run(arguments: dict[str, Any]) -> ToolResult:
        target = (base / arguments["path"]).resolve()
        if not target.is_relative_to(base):
            return ToolResult(f"{arguments['path']!r} is outside the readable root", True)
        if not target.is_file():
            return ToolResult(f"no such file: {arguments['path']!r}", True)
        data = await asyncio.to_thread(_read_head, target)
        return ToolResult(data.decode(errors="replace"))

    return FunctionTool(
        name="read_file",
        description="Read a text file, by a path relative to the server's readable root.",
        parameters_schema={
            "type": "object",
            "properties": {"path": {"type": "string", "minLength": 1}},
            "required": ["path"],
            "additionalProperties": False,
        },
        function=run,
        read_only=True,
        concurrency_safe=True,
        idempotent=True,
    )


def _read_head(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(READ_FILE_MAX_BYTES)


def builtin_tools(*, read_file_root: str = "") -> list[Tool]:
    """The built-in tools; read_file only when a root is configured."""
    tools = [current_time(), calculator()]
    if read_file_root:
        tools.append(read_file(Path(read_file_root)))
    return tools
