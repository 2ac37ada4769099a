"""An MCP server's tools as behest Tools, and their answers as the text a model sees."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import Client
from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    RequestParamsMeta,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp.types import Tool as McpTool

from behest import bounded_json
from behest.tools.base import FunctionTool, Tool, ToolResult
from behest.tools.context import ToolContext
from behest.tools.mcp_config import McpServerConfig

# One logger for everything about MCP servers, whichever module tells it.
log = logging.getLogger("behest.tools.mcp")

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")

Call = Callable[[str, dict[str, Any], ToolContext | None], Awaitable[ToolResult]]

# The `_meta` keys of a tools/call request that carry its ToolContext. The MCP spec's key
# format: a prefix of dot-separated labels in reverse DNS notation (one whose second label is
# "modelcontextprotocol" or "mcp" is MCP's own), a slash, and a name.
META_PREFIX = "io.behest/"
EXECUTION_ID, ATTEMPT, IDEMPOTENCY_KEY, RUN_ID, DEADLINE = (
    f"{META_PREFIX}{name}"
    for name in ("execution_id", "attempt", "idempotency_key", "run_id", "deadline")
)


def make_tools(config: McpServerConfig, listed: list[McpTool], call: Call) -> list[Tool]:
    """The server's listed tools, named `<server>__<tool>`; `call(tool, arguments, context)`
    runs one. A tool with an invalid schema or a name taken already is logged and left out;
    one that requires task-augmented execution is listed but never offered (`unsupported`)."""
    tools: list[Tool] = []
    seen: set[str] = set()
    for mcp_tool in listed:
        name = f"{config.name}__{_UNSAFE_NAME_CHARS.sub('_', mcp_tool.name)}"
        try:
            Draft202012Validator.check_schema(mcp_tool.input_schema)
        except SchemaError as exc:
            problem = f"invalid input schema: {exc.message}"
        else:
            problem = "duplicate name" if name in seen else ""
        if problem:
            log.warning(
                f"MCP server {config.name!r}: skipping tool {mcp_tool.name!r}: {problem}",
                extra={"mcp_server": config.name, "tool": mcp_tool.name},
            )
            continue
        seen.add(name)
        tools.append(_make_tool(config, name, mcp_tool, call))
    return tools


def _make_tool(config: McpServerConfig, name: str, mcp_tool: McpTool, call: Call) -> Tool:
    hints = mcp_tool.annotations
    read_only = bool(hints and hints.read_only_hint)
    description = (mcp_tool.description or mcp_tool.title or mcp_tool.name).strip()
    unsupported = _unsupported(mcp_tool)
    if unsupported:
        log.warning(
            f"MCP server {config.name!r}: tool {mcp_tool.name!r} is not offered: {unsupported}",
            extra={"mcp_server": config.name, "tool": mcp_tool.name},
        )

    async def function(arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        if unsupported:  # not offered to models; a run that calls it anyway learns why
            return ToolResult(f"MCP tool {mcp_tool.name!r} was not called: {unsupported}", True)
        return await call(mcp_tool.name, arguments, context)

    return FunctionTool(
        name=name,
        description=f"{description}\n\n(Tool {mcp_tool.name!r} of MCP server {config.name!r}.)",
        parameters_schema=mcp_tool.input_schema,
        function=function,
        timeout_s=config.timeout_s,
        read_only=read_only,
        concurrency_safe=read_only,
        idempotent=bool(hints and hints.idempotent_hint),
        requires_approval=config.requires_approval,
        unsupported=unsupported,
    )


def _unsupported(mcp_tool: McpTool) -> str:
    """Why behest cannot call the tool ("" when it can): one that requires task-augmented
    execution (MCP tasks, SEP-1686) answers a plain tools/call with an error, and the SDK
    behest uses has no client side of tasks (their methods are types only)."""
    execution = mcp_tool.execution
    if execution is not None and execution.task_support == "required":
        return (
            'it requires task-augmented execution (execution.taskSupport "required"), '
            "which behest does not run"
        )
    return ""


def request_meta(context: ToolContext | None) -> RequestParamsMeta | None:
    """The `_meta` of a tools/call request made for `context` (None without one): the
    execution, its attempt, the call's idempotency key, the run and the deadline (RFC 3339,
    UTC). Not the tenant, session or principal: a server learns no more than it needs."""
    if context is None:
        return None
    meta: dict[str, Any] = {
        EXECUTION_ID: context.execution_id,
        ATTEMPT: context.attempt,
        IDEMPOTENCY_KEY: context.idempotency_key,
        RUN_ID: context.run_id,
    }
    if context.deadline is not None:
        utc = context.deadline.astimezone(UTC)
        meta[DEADLINE] = utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return cast(RequestParamsMeta, meta)  # an open map: any key beside progress_token


def result_text(result: CallToolResult) -> str:
    """A tool result as text: text parts joined, other parts described briefly."""
    parts: list[str] = []
    has_text = False
    for block in result.content:
        match block:
            case TextContent():
                parts.append(block.text)
                has_text = True
            case ImageContent():
                parts.append(f"[image: {block.mime_type}]")
            case AudioContent():
                parts.append(f"[audio: {block.mime_type}]")
            case ResourceLink():
                parts.append(f"[resource link: {block.uri}]")
            case EmbeddedResource(resource=TextResourceContents() as resource):
                parts.append(f"[resource: {resource.uri}]\n{resource.text}")
                has_text = True
            case EmbeddedResource(resource=resource):
                parts.append(f"[resource: {resource.uri} ({resource.mime_type or 'binary'})]")
            case _:
                parts.append(f"[{getattr(block, 'type', 'unknown')} content]")
    if not has_text and result.structured_content is not None:
        try:
            bounded_json.check_depth(result.structured_content)
            structured = json.dumps(result.structured_content, ensure_ascii=False)
        except (bounded_json.JsonRefused, ValueError) as exc:
            structured = f"[structured content that {exc}]"
        parts.insert(0, structured)
    return "\n".join(parts)


# Pages of tools/list read from one server, at most.
_LIST_PAGES_MAX = 100


async def listed_tools(client: Client) -> list[McpTool]:
    """Every tool the server lists (its pages followed, a bounded number)."""
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES_MAX):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools
