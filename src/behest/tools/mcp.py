"""Tools from MCP servers named in the settings file, through the official `mcp` SDK.

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]

    [mcp.servers.search]
    url = "http://127.0.0.1:8931/mcp"
    headers = { Authorization = "Bearer ..." }

Each server is held by one long-lived task that enters the SDK's async context managers
(transport, then `mcp.Client`), lists the tools, waits to be told to stop and exits them
again: anyio cancel scopes must be entered and left by the same task. Tool calls go straight
through the connected `Client` from the caller's task; the SDK correlates concurrent
requests. A server that fails to start gives no tools; one that dies later turns its tools'
calls into error results.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import anyio
import httpx2
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    Implementation,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp.types import Tool as McpTool

from behest import __version__, bounded_json
from behest.errors import describe
from behest.tools.base import FunctionTool, Tool, ToolResult
from behest.tools.mcp_config import McpServerConfig, parse_mcp_servers

__all__ = ["McpServerConfig", "McpToolSource", "parse_mcp_servers", "result_text"]

log = logging.getLogger(__name__)

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_LIST_PAGES_MAX = 100
# Connecting includes spawning the server (`npx -y ...` may download it first) and listing tools.
DEFAULT_START_TIMEOUT_S = 30.0
# A stdio server that ignores its closed stdin is killed by the SDK after about 6 s.
STOP_TIMEOUT_S = 10.0
# Streamable HTTP holds a response stream open while a tool runs; reads wait this long.
_HTTP_READ_TIMEOUT_S = 300.0


class McpToolSource:
    """The tools of a set of MCP servers, with an explicit start/stop lifecycle."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise ValueError("two MCP servers have the same name")
        self._servers = [_Server(c, start_timeout_s) for c in configs]
        self._started = False

    async def start(self) -> None:
        """Connect to every server at once; one that fails is logged and gives no tools."""
        if self._started:
            return
        self._started = True
        await asyncio.gather(*(server.start() for server in self._servers))

    def tools(self) -> list[Tool]:
        """The tools of the connected servers, named `<server>__<tool>`."""
        return [t for server in self._servers if server.status == "connected" for t in server.tools]

    def status(self) -> dict[str, str]:
        """Server name → "connected", "starting", "failed: <cause>" or "stopped"."""
        return {server.config.name: server.status for server in self._servers}

    async def stop(self) -> None:
        """Close every session and subprocess; safe to call twice."""
        await asyncio.gather(*(server.stop() for server in self._servers))


class _Server:
    """One MCP server's connection, held open by one task."""

    def __init__(self, config: McpServerConfig, start_timeout_s: float) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.status = "stopped"
        self.tools: list[Tool] = []
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        self.status = "starting"
        self._task = asyncio.create_task(self._hold(), name=f"mcp server {self.config.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), self.start_timeout_s)
        except TimeoutError:
            self._fail(f"did not start within {self.start_timeout_s:g} s")
            self._close()

    async def stop(self) -> None:
        task = self._task
        self._stopping = True
        self._close()
        if task is not None:
            _, pending = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            if pending:  # only a server the SDK could not kill gets here
                log.warning(f"MCP server {self.config.name!r} did not stop in time; abandoning it")
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
        self._client = None
        self.tools = []
        self.status = "stopped"

    async def _hold(self) -> None:
        """The owner task: enter the SDK's context managers, wait for stop, exit them."""
        scope = self._scope = anyio.CancelScope(
            deadline=anyio.current_time() + self.start_timeout_s
        )
        if self._stop.is_set():  # stopped before this task first ran
            scope.cancel()
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(self._connect(stack))
                    listed = await _list_tools(client)
                    scope.deadline = math.inf
                    self._connected(client, listed)
                    await self._stop.wait()
            if scope.cancelled_caught and not self._stopping:
                self._fail(f"did not start within {self.start_timeout_s:g} s")
        except Exception as exc:
            lost = "connection lost: " if self.status == "connected" else ""
            self._fail(lost + _describe(exc))
        finally:
            self._client = None
            self._ready.set()

    def _connect(self, stack: AsyncExitStack) -> Client:
        config = self.config
        transport: AbstractAsyncContextManager[Any]
        if config.command:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=config.env,
                cwd=config.cwd or None,
            )
            transport = stdio_client(params, errlog=sys.stderr)
        else:
            http = httpx2.AsyncClient(
                headers=config.headers,
                timeout=httpx2.Timeout(config.timeout_s, read=_HTTP_READ_TIMEOUT_S),
            )
            stack.push_async_callback(http.aclose)
            transport = streamable_http_client(config.url, http_client=http)
        return Client(
            transport,
            read_timeout_seconds=config.timeout_s,
            client_info=Implementation(name="behest", version=__version__),
            cache=None,
        )

    def _connected(self, client: Client, listed: list[McpTool]) -> None:
        if self.status != "starting":
            return  # gave up on it meanwhile; the owner task is already on its way out
        self._client = client
        self.tools = self._make_tools(listed)
        self.status = "connected"
        self._ready.set()
        log.info(
            f"MCP server {self.config.name!r} connected with {len(self.tools)} tool(s)",
            extra={"mcp_server": self.config.name, "tools": [t.name for t in self.tools]},
        )

    def _fail(self, cause: str) -> None:
        """Record why the server is unusable; only the first cause counts."""
        if self._stopping or self.status not in ("starting", "connected"):
            return  # a call cut short by stop() is not the server's failure
        what = "failed to start" if self.status == "starting" else "became unavailable"
        self.status = f"failed: {cause}"
        self._client = None
        log.error(
            f"MCP server {self.config.name!r} ({self.config.transport}) {what}: {cause}",
            extra={"mcp_server": self.config.name, "error": cause},
        )

    def _close(self) -> None:
        self._stop.set()
        if self._scope is not None and not self._ready.is_set():
            self._scope.cancel()

    def _make_tools(self, listed: list[McpTool]) -> list[Tool]:
        tools: list[Tool] = []
        seen: set[str] = set()
        for mcp_tool in listed:
            name = f"{self.config.name}__{_UNSAFE_NAME_CHARS.sub('_', mcp_tool.name)}"
            try:
                Draft202012Validator.check_schema(mcp_tool.input_schema)
            except SchemaError as exc:
                problem = f"invalid input schema: {exc.message}"
            else:
                problem = "duplicate name" if name in seen else ""
            if problem:
                log.warning(
                    f"MCP server {self.config.name!r}: skipping tool {mcp_tool.name!r}: {problem}",
                    extra={"mcp_server": self.config.name, "tool": mcp_tool.name},
                )
                continue
            seen.add(name)
            tools.append(self._make_tool(name, mcp_tool))
        return tools

    def _make_tool(self, name: str, mcp_tool: McpTool) -> Tool:
        hints = mcp_tool.annotations
        read_only = bool(hints and hints.read_only_hint)
        description = (mcp_tool.description or mcp_tool.title or mcp_tool.name).strip()

        async def call(arguments: dict[str, Any]) -> ToolResult:
            return await self.call(mcp_tool.name, arguments)

        return FunctionTool(
            name=name,
            description=f"{description}\n\n(Tool {mcp_tool.name!r} of MCP server "
            f"{self.config.name!r}.)",
            parameters_schema=mcp_tool.input_schema,
            function=call,
            timeout_s=self.config.timeout_s,
            read_only=read_only,
            concurrency_safe=read_only,
            idempotent=bool(hints and hints.idempotent_hint),
            requires_approval=self.config.requires_approval,
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Call one MCP tool; every failure becomes an error result, never an exception."""
        client, timeout_s = self._client, self.config.timeout_s
        if client is None:
            return self._unavailable()
        try:
            async with asyncio.timeout(timeout_s):
                result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
        except TimeoutError:
            return ToolResult(f"MCP tool {tool!r} timed out after {timeout_s:g} s", True)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                return self._lost(exc)
            if exc.code == REQUEST_TIMEOUT:
                return ToolResult(f"MCP tool {tool!r} timed out after {timeout_s:g} s", True)
            return ToolResult(f"MCP server {self.config.name!r} rejected {tool!r}: {exc}", True)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            return self._lost(exc)
        except Exception as exc:  # a bad answer is the model's to react to, not the run's
            return ToolResult(f"MCP tool {tool!r} failed: {_describe(exc)}", True)
        return ToolResult(result_text(result), result.is_error)

    def _lost(self, exc: BaseException) -> ToolResult:
        self._fail(f"connection lost: {_describe(exc)}")
        self._stop.set()  # let the owner task close the session and reap the process
        return self._unavailable()

    def _unavailable(self) -> ToolResult:
        return ToolResult(f"MCP server {self.config.name!r} is unavailable ({self.status})", True)


async def _list_tools(client: Client) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES_MAX):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


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


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking through anyio's single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "the server closed the connection (did it exit? see its stderr)"
    return describe(exc)
