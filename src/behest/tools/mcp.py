"""Tools from MCP servers named in the settings file, through the official `mcp` SDK.

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]

    [mcp.servers.search]
    url = "http://127.0.0.1:8931/mcp"
    headers = { Authorization = "Bearer ..." }

Each server is held by one long-lived task that enters the SDK's async context managers
(transport, then `mcp.Client`), lists the tools, waits until the connection ends or it is told
to stop, and exits them again: anyio cancel scopes must be entered and left by the same task.
Tool calls go straight through the connected `Client` from the caller's task; the SDK
correlates concurrent requests. A server that fails to start gives no tools. One whose
connection is lost later — it exited, or broke the protocol — is restarted by that task, a few
times with backoff; the call in flight fails at once, and calls made while it restarts wait
for it (half their timeout at most).

A server's own JSON-RPC errors are tool errors with its message, whatever their code: the
numbers the SDK uses for its own timeout and closed connection are ordinary ones a server may
send too, so those are told apart by how the SDK raises them (`_failure`), not by the number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.types import Implementation
from mcp.types import Tool as McpTool

from behest import __version__
from behest.backoff import backoff_s
from behest.errors import describe
from behest.tools.base import Tool, ToolResult
from behest.tools.context import ToolContext
from behest.tools.mcp_config import McpServerConfig
from behest.tools.mcp_elicit import InFlight, elicitation_callback
from behest.tools.mcp_framing import sendable
from behest.tools.mcp_logs import logging_callback
from behest.tools.mcp_progress import progress_callback
from behest.tools.mcp_sampling import sampling_callback
from behest.tools.mcp_tools import listed_tools, make_tools, request_meta, result_text
from behest.tools.mcp_transport import Connection, transport

__all__ = ["McpServerConfig", "McpToolSource", "result_text"]

log = logging.getLogger(__name__)

# Connecting includes spawning the server (`npx -y ...` may download it first) and listing tools.
DEFAULT_START_TIMEOUT_S = 30.0
# A stdio server that ignores its closed stdin is killed by the SDK after about 6 s.
STOP_TIMEOUT_S = 10.0
# Restarts after a lost connection: at most this many in a row, with full-jitter backoff
# (the project's one backoff); a connection that lasted _STABLE_S starts the count again.
RESTARTS = 5
RESTART_FIRST_S, RESTART_MAX_S = 0.5, 8.0
_STABLE_S = 60.0
_LOST = "the connection to the server was lost"


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
        """Server name → "connected", "starting", "restarting: <cause>", "failed: <cause>" or
        "stopped"."""
        return {server.config.name: server.status for server in self._servers}

    async def stop(self) -> None:
        """Close every session and subprocess; safe to call twice."""
        await asyncio.gather(*(server.stop() for server in self._servers))


class _Server:
    """One MCP server's connection, held open (and opened again) by one task."""

    def __init__(self, config: McpServerConfig, start_timeout_s: float) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.status = "stopped"
        self.tools: list[Tool] = []
        self._client: Client | None = None
        self._connection = Connection()
        self._connecting: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # the first connection is up, or failed
        self._settled = asyncio.Event()  # not restarting
        self._settled.set()
        self._stop = asyncio.Event()
        self._stopping = False
        self._in_flight = InFlight(config.name)  # whose questions (tools/mcp_elicit.py)

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
        self._settled.set()

    def _close(self) -> None:
        """Tell the owner task to end: no restart, the connection closed (or its start cut)."""
        self._stopping = True
        self._stop.set()
        self._connection.end()
        if self._connecting is not None:
            self._connecting.cancel()

    async def _hold(self) -> None:
        """The owner task: connect, serve until stopped, connect again after a lost connection."""
        try:
            await self._keep_connected()
        finally:
            self._ready.set()

    async def _keep_connected(self) -> None:
        restarts, ever_up = 0, False
        while True:
            connection = self._connection = Connection(on_end=self._ended)
            up_since = await self._serve(connection, list_tools=not ever_up)
            cause = connection.cause or _LOST
            if self._stopping:
                return
            if not ever_up and up_since is None:
                self._fail(cause)
                return
            ever_up = True
            if up_since is not None and time.monotonic() - up_since >= _STABLE_S:
                restarts = 0
            restarts += 1
            if restarts > RESTARTS:
                self._fail(f"{cause}; gave up after {RESTARTS} restarts")
                return
            self._restarting(cause, restarts, was_up=up_since is not None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stop.wait(),
                    backoff_s(restarts, initial_s=RESTART_FIRST_S, max_s=RESTART_MAX_S),
                )

    async def _serve(self, connection: Connection, *, list_tools: bool) -> float | None:
        """One connection, from its start (within start_timeout_s) until it ends or behest
        stops it; ends `connection` with the reason. When it was up since, or None."""
        scope = self._connecting = anyio.CancelScope(
            deadline=anyio.current_time() + self.start_timeout_s
        )
        if self._stopping:  # stopped before this task got here
            scope.cancel()
        up_since: float | None = None
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(self._client_for(connection, stack))
                    listed = await listed_tools(client) if list_tools else None
                    self._connecting = None
                    scope.deadline = math.inf
                    up_since = time.monotonic()
                    self._connected(client, listed)
                    await connection.ended.wait()
            if scope.cancelled_caught and not self._stopping:
                connection.end(f"did not start within {self.start_timeout_s:g} s")
        except Exception as exc:
            connection.end(describe(exc))
        finally:
            self._client = None
            self._connecting = None
            connection.end()
        return up_since

    def _ended(self) -> None:
        """A connection ended: no new calls go onto it; calls wait for what comes next."""
        self._client = None
        if not (self._stopping or self.status.startswith("failed")):
            self._settled.clear()

    def _client_for(self, connection: Connection, stack: AsyncExitStack) -> Client:
        """The SDK's client, answering questions, sampling (if allowed) and log messages."""
        config = self.config
        return Client(
            transport(config, connection, stack),
            read_timeout_seconds=config.timeout_s,
            client_info=Implementation(name="behest", version=__version__),
            cache=None,
            elicitation_callback=elicitation_callback(self._in_flight),
            sampling_callback=sampling_callback(self._in_flight) if config.sampling else None,
            logging_callback=logging_callback(config),
            log_level=config.log_level,
        )

    def _connected(self, client: Client, listed: list[McpTool] | None) -> None:
        if self._stopping:
            return  # gave up on it meanwhile; the owner task is already on its way out
        self._client = client
        if listed is not None:
            self.tools = make_tools(self.config, listed, self.call)
        again = self.status.startswith("restarting")
        self.status = "connected"
        self._ready.set()
        self._settled.set()
        log.info(
            f"MCP server {self.config.name!r} {'reconnected' if again else 'connected'} with "
            f"{len(self.tools)} tool(s)",
            extra={"mcp_server": self.config.name, "tools": [t.name for t in self.tools]},
        )

    def _restarting(self, cause: str, attempt: int, *, was_up: bool) -> None:
        self.status = f"restarting: {cause}"
        what = "became unavailable" if was_up else "did not restart"
        log.error(
            f"MCP server {self.config.name!r} ({self.config.transport}) {what}: {cause}; "
            f"restarting it (attempt {attempt} of {RESTARTS})",
            extra={"mcp_server": self.config.name, "error": cause},
        )

    def _fail(self, cause: str) -> None:
        """Record why the server is unusable for good; only the first cause counts."""
        if self._stopping or self.status.startswith("failed"):
            return  # a call cut short by stop() is not the server's failure
        what = "failed to start" if self.status == "starting" else "became unavailable"
        self.status = f"failed: {cause}"
        self._client = None
        self._settled.set()
        log.error(
            f"MCP server {self.config.name!r} ({self.config.transport}) {what}: {cause}",
            extra={"mcp_server": self.config.name, "error": cause},
        )

    async def call(
        self, tool: str, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> ToolResult:
        """Call one MCP tool, its context in the request's `_meta` with a progress token
        (mcp_progress.py); every failure becomes an error result, never an exception."""
        timeout_s, began = self.config.timeout_s, time.monotonic()
        if not self._settled.is_set():  # restarting: wait for it, leaving time for the call
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), timeout_s / 2)
        client, connection = self._client, self._connection
        if client is None:
            return self._unavailable()
        if not sendable(arguments):
            return ToolResult(
                f"MCP tool {tool!r} was not called: its arguments hold text that is not valid "
                "Unicode (a lone surrogate escape such as \\ud800)",
                True,
            )
        remaining = timeout_s - (time.monotonic() - began)
        try:
            async with asyncio.timeout(remaining):
                with self._in_flight.serving(context):
                    result = await client.call_tool(
                        tool,
                        arguments,
                        read_timeout_seconds=remaining,
                        progress_callback=progress_callback(context),
                        meta=request_meta(context),
                    )
        except TimeoutError:
            return self._timed_out(tool)
        except MCPError as exc:
            return self._failure(tool, exc, connection)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            connection.end(f"the connection failed: {describe(exc)}")
            return self._lost(tool, connection)
        except Exception as exc:  # a bad answer is the model's to react to, not the run's
            return ToolResult(f"MCP tool {tool!r} failed: {describe(exc)}", True)
        return ToolResult(result_text(result), result.is_error)

    def _failure(self, tool: str, exc: MCPError, connection: Connection) -> ToolResult:
        """An MCPError as the model sees it. The SDK raises its own read timeout while handling
        the TimeoutError that ended the wait, and its "connection closed" once the stream it
        reads has ended (which `connection` knows) or while handling a failed write; any
        other MCPError is the server's own answer."""
        if isinstance(exc.__context__, TimeoutError):
            return self._timed_out(tool)
        write_failed = isinstance(
            exc.__context__, anyio.ClosedResourceError | anyio.BrokenResourceError
        )
        if connection.ended.is_set() or write_failed:
            connection.end()  # the owner task reconnects
            return self._lost(tool, connection)
        return ToolResult(f"MCP tool {tool!r} failed: {exc.message}", True)

    def _lost(self, tool: str, connection: Connection) -> ToolResult:
        if self._stopping:
            return self._unavailable()
        return ToolResult(
            f"MCP tool {tool!r} failed: {connection.cause or _LOST}; behest is restarting MCP "
            f"server {self.config.name!r}",
            True,
        )

    def _timed_out(self, tool: str) -> ToolResult:
        return ToolResult(f"MCP tool {tool!r} timed out after {self.config.timeout_s:g} s", True)

    def _unavailable(self) -> ToolResult:
        name = self.config.name
        if self.status.startswith("restarting: "):
            waited = self.config.timeout_s / 2
            return ToolResult(
                f"MCP server {name!r} is restarting ({self.status.removeprefix('restarting: ')})"
                f" and was not back within {waited:g} s; try again later",
                True,
            )
        return ToolResult(f"MCP server {name!r} is unavailable ({self.status})", True)
