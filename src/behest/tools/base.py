"""The Tool protocol: JSON Schema in, text out, with a timeout and safety flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model sees of a tool call; `is_error` marks failures it should react to."""

    text: str
    is_error: bool = False


class Tool(Protocol):
    """A callable tool. Flags tell the loop what it may do with it."""

    name: str
    description: str
    parameters_schema: dict[str, Any]
    timeout_s: float
    read_only: bool
    concurrency_safe: bool
    idempotent: bool

    async def __call__(self, arguments: dict[str, Any]) -> ToolResult: ...
