"""The transports behest talks to MCP servers over, and the fate of each connection.

Over stdio behest reads the server's output itself (the SDK spawns and stops the process):
each message is bounded while it is read (`mcp_framing`), and output that breaks the protocol
(bytes that are not UTF-8, a line that is not JSON-RPC) ends the connection at once, so the
calls waiting on it fail instead of waiting out their timeout. Its stderr is read too, each
line logged as an entry naming the server: behest's log stays JSON, line for line. Over
streamable HTTP the SDK's transport is used, with JSON bodies bounded like stdio messages (the
SDK bounds SSE events).

A `Connection` is how the rest knows that a connection has ended, and why: the SDK reports a
closed connection as an MCPError whose code a server may also send, so the code alone says
nothing; a call that fails while its connection has ended has lost the connection.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, TextIO, cast

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client._transport import TransportStreams

# The SDK's own spawn and stop of a stdio server (private names, of the pinned major version):
# the stop's order is the spec's, and its details (a child holding the pipes, uvloop) subtle.
from mcp.client.stdio import (
    _create_platform_compatible_process,
    _get_executable_command,
    _stop_server_process,
    get_default_environment,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from behest.errors import describe
from behest.tools.mcp_config import McpServerConfig
from behest.tools.mcp_framing import (
    MAX_MESSAGE_BYTES,
    Lines,
    LongLine,
    NotJsonRpc,
    ProtocolBroken,
    long_message,
    message,
)

# One logger for everything about MCP servers, whichever module tells it.
log = logging.getLogger("behest.tools.mcp")

CLOSED = "the server closed the connection (did it exit? see its stderr)"
# Streamable HTTP holds a response stream open while a tool runs; reads wait this long.
_HTTP_READ_TIMEOUT_S = 300.0
# A stdio server's stderr, piped to behest (the SDK's type says a file; anyio takes PIPE), and
# the most of one of its lines that is logged.
_PIPE = cast(TextIO, subprocess.PIPE)
_STDERR_LINE_BYTES = 8192


class Connection:
    """One connection to a server: whether it has ended, and the first reason given.
    `on_end` runs when it ends, before anything waiting on it runs."""

    def __init__(self, on_end: Callable[[], None] = lambda: None) -> None:
        self.ended = asyncio.Event()
        self.cause = ""
        self._on_end = on_end

    def end(self, cause: str = "") -> None:
        """End it (once); a later call may still give the reason if none was known."""
        if cause and not self.cause:
            self.cause = cause
        if not self.ended.is_set():
            self.ended.set()
            self._on_end()


def transport(
    config: McpServerConfig, connection: Connection, stack: AsyncExitStack
) -> AbstractAsyncContextManager[TransportStreams]:
    """The transport of the server's config; `stack` closes what it needs closed after it."""
    if config.command:
        return _watched(_stdio(config, connection), connection)
    http = httpx2.AsyncClient(
        headers=config.headers,
        timeout=httpx2.Timeout(config.timeout_s, read=_HTTP_READ_TIMEOUT_S),
        event_hooks={"response": [_bound_json_body]},
    )
    stack.push_async_callback(http.aclose)
    return _watched(streamable_http_client(config.url, http_client=http), connection)


@asynccontextmanager
async def _stdio(
    config: McpServerConfig, connection: Connection
) -> AsyncIterator[TransportStreams]:
    """The server as a child process, its stdout read here and its stdin written."""
    process = await _create_platform_compatible_process(
        command=await _get_executable_command(config.command),
        args=list(config.args),
        env=get_default_environment() | (config.env or {}),
        errlog=_PIPE,
        cwd=config.cwd or None,
    )
    # No await until the task group is entered: a cancel in between would leak the process.
    to_session, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_read, config.name, process, to_session, connection)
        tasks.start_soon(_write, process, from_session, connection)
        tasks.start_soon(_log_stderr, config.name, process)
        try:
            yield incoming, outgoing
        finally:
            incoming.close()
            outgoing.close()
            # The SDK's stop (stdin closed, a grace period, then the process group killed)
            # must finish even when this task is cancelled, or the process would outlive it.
            with anyio.CancelScope(shield=True):
                await _stop_server_process(process)
            tasks.cancel_scope.cancel()


async def _read(
    name: str,
    process: Any,
    to_session: MemoryObjectSendStream[SessionMessage | Exception],
    connection: Connection,
) -> None:
    """Messages from the server's stdout to the session, until it ends or breaks the protocol;
    then its output is drained (a server blocked on a full pipe cannot exit)."""
    lines, spoke = Lines(), False
    try:
        async with to_session:
            try:
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        received = _message(name, line, spoke)
                        if received is not None:
                            spoke = True
                            await to_session.send(received)
                connection.end(CLOSED)
            except ProtocolBroken as exc:
                # Before the session sees the stream end: the calls it fails then find why.
                connection.end(str(exc))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the session is gone: behest is closing the connection
            except OSError as exc:
                connection.end(f"reading the server's output failed: {describe(exc)}")
        async for _ in process.stdout:
            pass
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # behest's own shutdown closed the pipe under the drain


async def _log_stderr(name: str, process: Any) -> None:
    """Each line the server writes on its stderr, as an entry of behest's log naming it."""
    lines = Lines(_STDERR_LINE_BYTES)
    try:
        async for chunk in process.stderr:
            for line in lines.feed(chunk):
                _log_line(name, line)
        for line in lines.feed(b"\n"):  # a last line without its newline
            _log_line(name, line)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # behest's own shutdown closed the pipe


def _log_line(name: str, line: bytes | LongLine) -> None:
    if isinstance(line, LongLine):
        text = f"{line.head.decode(errors='replace')}… (a line of {line.size:,} bytes, cut)"
    else:
        text = line.decode(errors="replace").rstrip()
    if text.strip():
        log.info(f"MCP server {name!r} stderr: {text}", extra={"mcp_server": name})


def _message(name: str, line: bytes | LongLine, spoke: bool) -> SessionMessage | None:
    if isinstance(line, LongLine):
        answer = long_message(line)
        if answer is None:
            log.warning(
                f"MCP server {name!r} sent a message of {line.size:,} bytes that answers no "
                "request of behest's; dropped it",
                extra={"mcp_server": name},
            )
        return answer
    try:
        return message(line)
    except NotJsonRpc as exc:
        if spoke:
            raise
        # Before its first message a server may print a banner; many do, and work otherwise.
        log.warning(f"MCP server {name!r}: skipped output before its first message: {exc}")
        return None


async def _write(
    process: Any, from_session: MemoryObjectReceiveStream[SessionMessage], connection: Connection
) -> None:
    try:
        async with from_session:
            async for outgoing in from_session:
                data = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(f"{data}\n".encode())
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
        connection.end(f"the server stopped reading its input ({describe(exc)})")


@asynccontextmanager
async def _watched(
    inner: AbstractAsyncContextManager[TransportStreams], connection: Connection
) -> AsyncIterator[TransportStreams]:
    """A transport whose read stream ends the connection when the SDK stops reading it."""
    async with inner as (reads, writes):
        yield _WatchedReads(reads, connection), writes


class _WatchedReads:
    """A transport's read stream that ends its connection once it is closed. The SDK's
    dispatcher closes the stream it reads (its end, or its task cancelled because the
    transport failed) before it fails every waiting call with "connection closed"; so when a
    call gets that error, `Connection.ended` already tells it from a server's own error."""

    def __init__(self, inner: Any, connection: Connection) -> None:
        self._inner = inner
        self._connection = connection

    @property
    def last_context(self) -> Any:  # the sender's context, which the SDK looks for
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item: SessionMessage | Exception = await self._inner.receive()
        return item

    def __aiter__(self) -> _WatchedReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._connection.end()  # before any await: the waiting calls are failed right after
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedReads:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _bound_json_body(response: httpx2.Response) -> None:
    """A JSON answer is read only up to MAX_MESSAGE_BYTES (SSE events: the SDK's own bound)."""
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        response.stream = _BoundedBody(response.stream)


class TooLarge(httpx2.StreamError):
    """An answer over the bound; the SDK answers the request with this error."""


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES:
                raise TooLarge(f"the answer is over the {MAX_MESSAGE_BYTES:,} bytes behest reads")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
