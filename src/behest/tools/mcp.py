"""Tools from MCP servers named in the settings file, through the official `mcp` SDK.

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]

    [mcp.servers.search]
    url = "http://127.0.0.1:8931/mcp"
    headers = { Authorization = "Bearer ..." }

Each server is a supervised child: one long-lived task enters the SDK's async context
managers (transport, then `mcp.Client`), lists the tools, waits until the connection ends or
it is told to stop, and exits them again (anyio cancel scopes must be entered and left by the
same task); then it connects again after a backoff, forever, until behest stops. Its state —
starting, ready, restarting, failed — is `mcp_states.Lifecycle`'s. `start` returns at once:
nothing waits for a server but the calls of its tools (and runs that name them:
tools/server_tools.py).

Tool calls go straight through the connected `Client` from the caller's task; the SDK
correlates concurrent requests (tools/mcp_calls.py). The call in flight when a connection is
lost fails at once; calls made while a server starts or restarts wait for it (half their
timeout at most); calls of a failed server fail at once, saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client
from mcp.types import Implementation

from behest import __version__
from behest.errors import describe
from behest.tools.base import Tool, ToolResult
from behest.tools.context import ToolContext
from behest.tools.mcp_calls import LOST, Calling, call_tool
from behest.tools.mcp_config import McpServerConfig
from behest.tools.mcp_elicit import InFlight, elicitation_callback
from behest.tools.mcp_logs import logging_callback
from behest.tools.mcp_sampling import sampling_callback
from behest.tools.mcp_states import (
    DEFAULT_RESTART_MAX_S,
    FAILED,
    READY,
    RESTARTING,
    STARTING,
    STOPPED,
    Lifecycle,
    McpServerState,
)
from behest.tools.mcp_tools import listed_tools, make_tools, result_text
from behest.tools.mcp_transport import Connection, transport

__all__ = ["McpServerConfig", "McpToolSource", "result_text"]

log = logging.getLogger(__name__)

# One connection attempt: spawning the server (`npx -y ...` may download it first), the
# handshake and listing its tools.
DEFAULT_START_TIMEOUT_S = 30.0
# A stdio server that ignores its closed stdin is killed by the SDK after about 6 s.
STOP_TIMEOUT_S = 10.0
# What a command that cannot be run is told by (the OSError of the spawn).
_CANNOT_RUN = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR}

Listener = Callable[[McpServerState], None]


class McpToolSource:
    """The tools of a set of MCP servers, each a supervised child; start/stop lifecycle."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        restart_max_s: float = DEFAULT_RESTART_MAX_S,
    ) -> None:
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise ValueError("two MCP servers have the same name")
        self._listeners: list[Listener] = []
        self._servers = [_Server(c, start_timeout_s, restart_max_s, self._changed) for c in configs]
        self._started = False

    def watch(self, listener: Listener) -> None:
        """Call `listener` with a server's state whenever it changes (from `start` on)."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Start connecting to every server; returns at once (see `settled`)."""
        if self._started:
            return
        self._started = True
        for server in self._servers:
            server.start()

    async def settled(self, timeout_s: float | None = None) -> None:
        """Until every server is ready or has failed, at most `timeout_s` (by default as long
        as an attempt may take), for tests and tools: the app does not wait."""
        most = timeout_s or max(s.start_timeout_s for s in self._servers) + STOP_TIMEOUT_S
        await asyncio.gather(*(s.life.wait_settled(most) for s in self._servers))

    async def wait(self, names: Collection[str]) -> None:
        """Until each named server that is starting or restarting is ready or has failed,
        each at most its tools' timeout (timeout_s); at once for the others."""
        waits = [s.life.wait_settled(s.config.timeout_s) for s in self._servers if s.name in names]
        await asyncio.gather(*waits)

    def tools(self) -> list[Tool]:
        """The tools of the ready servers, named `<server>__<tool>`."""
        return [t for server in self._servers if server.life.state == READY for t in server.tools]

    def servers(self) -> list[McpServerState]:
        """Every server as it is now, its tools as it last listed them."""
        return [server.snapshot() for server in self._servers]

    def status(self) -> dict[str, str]:
        """Server name → "ready", "starting", "restarting: <cause>", "failed: <cause>" or
        "stopped"."""
        return {server.name: server.life.text() for server in self._servers}

    async def stop(self) -> None:
        """Close every session and subprocess; safe to call twice."""
        await asyncio.gather(*(server.stop() for server in self._servers))

    def _changed(self, state: McpServerState) -> None:
        for listener in self._listeners:
            try:
                listener(state)
            except Exception:
                log.exception("a listener of MCP server states failed")


class _Server:
    """One MCP server's connection, held open (and opened again) by one task."""

    def __init__(
        self,
        config: McpServerConfig,
        start_timeout_s: float,
        restart_max_s: float,
        changed: Listener,
    ) -> None:
        self.config = config
        self.name = config.name
        self.start_timeout_s = start_timeout_s
        self.tools: list[Tool] = []
        self.listed = False
        self.life = Lifecycle(
            config.name,
            config.transport,
            restart_max_s=restart_max_s,
            on_change=lambda: changed(self.snapshot()),
        )
        self._client: Client | None = None
        self._connection = Connection()
        self._connecting: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stopping = False
        self._in_flight = InFlight(config.name)  # whose questions (tools/mcp_elicit.py)

    def snapshot(self) -> McpServerState:
        life = self.life
        return McpServerState(self.name, life.state, life.cause, tuple(self.tools), self.listed)

    def start(self) -> None:
        if self._stopping:
            return
        self.life.starting()
        self._task = asyncio.create_task(self._keep_connected(), name=f"mcp server {self.name}")

    async def stop(self) -> None:
        task = self._task
        self._close()
        if task is not None:
            _, pending = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            if pending:  # only a server the SDK could not kill gets here
                log.warning(f"MCP server {self.name!r} did not stop in time; abandoning it")
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
        self._client = None
        self.life.stopped()

    def _close(self) -> None:
        """Tell the owner task to end: no restart, the connection closed (or its start cut)."""
        self._stopping = True
        self._stop.set()
        self._connection.end()
        if self._connecting is not None:
            self._connecting.cancel()

    async def _keep_connected(self) -> None:
        """The owner task: connect, serve until the connection ends, wait, connect again."""
        while not self._stopping:
            connection = self._connection = Connection(on_end=self._ended)
            up_since = await self._serve(connection)
            if self._stopping:
                return
            up_for_s = None if up_since is None else time.monotonic() - up_since
            wait = self.life.retry_wait(connection.cause or LOST, up_for_s=up_for_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)

    async def _serve(self, connection: Connection) -> float | None:
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
                    listed = await listed_tools(client)
                    self._connecting = None
                    scope.deadline = math.inf
                    up_since = time.monotonic()
                    self._connected(client, make_tools(self.config, listed, self.call))
                    await connection.ended.wait()
            if scope.cancelled_caught and not self._stopping:
                connection.end(f"did not start within {self.start_timeout_s:g} s")
        except Exception as exc:
            connection.end(self._cause(exc, connecting=up_since is None))
        finally:
            self._client = None
            self._connecting = None
            connection.end()
        return up_since

    def _cause(self, exc: BaseException, *, connecting: bool) -> str:
        """Why a connection failed; a command that cannot be run is named (uvloop's OSError
        of a spawn names no file)."""
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        command = self.config.command
        if connecting and command and isinstance(exc, OSError) and exc.errno in _CANNOT_RUN:
            where = f" in {self.config.cwd!r}" if self.config.cwd else ""
            return f"cannot run command {command!r}{where}: {exc.strerror}"
        return describe(exc)

    def _ended(self) -> None:
        """A connection ended: no new calls go onto it; calls wait for what comes next."""
        self._client = None
        if not self._stopping:
            self.life.lost(self._connection.cause or LOST)

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

    def _connected(self, client: Client, tools: list[Tool]) -> None:
        if self._stopping:
            return  # gave up on it meanwhile; the owner task is already on its way out
        self._client = client
        again, self.tools, self.listed = self.listed, tools, True
        self.life.ready(len(tools), again=again)

    async def call(
        self, tool: str, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> ToolResult:
        """Call one MCP tool (mcp_calls.py: its context in the request's `_meta`, with a
        progress token); a server that starts or restarts is waited for, half the call's
        timeout at most; every failure becomes an error result."""
        timeout_s, began = self.config.timeout_s, time.monotonic()
        await self.life.wait_settled(timeout_s / 2)
        client, connection = self._client, self._connection
        if client is None or self.life.state != READY:
            return self._unavailable()
        calling = Calling(self.name, timeout_s, client, connection, self._in_flight)
        remaining = timeout_s - (time.monotonic() - began)
        result = await call_tool(calling, tool, arguments, context, remaining)
        if result.is_error and self._stopping:
            return self._unavailable()  # cut short by behest's stop, not the server's fault
        return result

    def _unavailable(self) -> ToolResult:
        life, name, waited = self.life, self.name, self.config.timeout_s / 2
        if life.state == FAILED:
            return ToolResult(
                f"MCP server {name!r} is unavailable: {life.cause}; behest tries it again in "
                f"{life.retry_in_s():.1f} s",
                True,
            )
        if life.state in (STARTING, RESTARTING):
            cause = f" ({life.cause})" if life.cause else ""
            return ToolResult(
                f"MCP server {name!r} is {life.state}{cause} and was not ready within "
                f"{waited:g} s; try again later",
                True,
            )
        return ToolResult(f"MCP server {name!r} is unavailable ({life.state or STOPPED})", True)
