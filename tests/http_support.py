"""Test support for the HTTP doors: a loopback TCP proxy that drops connections (the server's
side gone mid-stream, as a restart or a balancer does), passing bytes both ways and keeping
what each connection sent, so a test watches a client come back without sleeping for
anything; and a plain Connect client over real HTTP (httpx2): unary JSON POSTs, and server
streams read envelope by envelope."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

CONNECT_JSON = {"content-type": "application/json"}
CONNECT_STREAM_JSON = {"content-type": "application/connect+json"}
_ID_LINE = re.compile(rb"(?m)^id: ")


@dataclass
class Connection:
    """One client connection through the proxy: what the client sent, what it was sent."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)
    dropped: bool = False


class DroppingProxy:
    """A TCP proxy to 127.0.0.1:`port` that drops connections when told to: `cut()` at once,
    or `drop_after(n)` with the connection that carries the n-th server-sent event (`id:`
    line) from then on."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._transports: list[asyncio.BaseTransport] = []
        self._drop_after: int | None = None
        self._since_armed = 0
        self.connections: list[Connection] = []
        self.drops = 0
        self.dropped = asyncio.Event()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def drop_after(self, events: int) -> None:
        """Abort the connection that carries the `events`-th event from now on (once)."""
        self._drop_after, self._since_armed = events, 0
        self.dropped.clear()

    def cut(self) -> None:
        """Abort every connection the proxy carries now (the server's side gone, mid-stream)."""
        for transport in self._transports:
            transport.abort()
        self.drops += 1

    def requests(self) -> bytes:
        """Everything every client sent through the proxy."""
        return b"".join(bytes(c.sent) for c in self.connections)

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for transport in self._transports:
            transport.abort()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(self._handlers)
        await self._server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        connection = Connection()
        self.connections.append(connection)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
            self._transports += [writer.transport, up_writer.transport]
            try:
                await self._pipe(reader, writer, up_reader, up_writer, connection)
            finally:
                up_writer.transport.abort()
        finally:
            if connection.dropped:
                writer.transport.abort()
            else:
                writer.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await writer.wait_closed()
            self._handlers.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        connection: Connection,
    ) -> None:
        async def upstream() -> None:
            while data := await reader.read(65536):
                connection.sent += data
                up_writer.write(data)
                await up_writer.drain()
            with contextlib.suppress(OSError):
                up_writer.write_eof()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                connection.received += data
                writer.write(data)
                await writer.drain()
                if self._drop_after is not None:
                    self._since_armed += len(_ID_LINE.findall(data))
                    if self._since_armed >= self._drop_after:
                        self._drop_after = None
                        connection.dropped = True
                        self.drops += 1
                        self.dropped.set()
                        return

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)


@dataclass
class Streamed:
    """What a Connect server stream delivered: its messages, then its end (error or none)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    broken: bool = False

    @property
    def error(self) -> dict[str, Any] | None:
        return (self.end or {}).get("error")


def envelope(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(body)) + body


async def envelopes(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    """Connect's (and gRPC-Web's) envelopes, (flags, data), from a body's chunks."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= 5:
            flags, size = struct.unpack(">BI", buffer[:5])
            if len(buffer) < 5 + size:
                break
            yield flags, buffer[5 : 5 + size]
            buffer = buffer[5 + size :]


class Connect:
    """A Connect client speaking JSON over plain HTTP/1.1."""

    def __init__(self, base: str, token: str = "", headers: dict[str, str] | None = None) -> None:
        self.base = base
        self.headers = dict(headers or {})
        if token:
            self.headers["authorization"] = f"Bearer {token}"

    async def call(self, method: str, message: dict[str, Any]) -> httpx2.Response:
        """A unary call; the response as it came (status, JSON body)."""
        async with httpx2.AsyncClient(timeout=30) as client:
            return await client.post(
                f"{self.base}/agent.v1.{method}",
                json=message,
                headers={**CONNECT_JSON, **self.headers},
            )

    async def ok(self, method: str, message: dict[str, Any]) -> dict[str, Any]:
        response = await self.call(method, message)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def stream(
        self, method: str, message: dict[str, Any], *, until: Any = None, base: str = ""
    ) -> Streamed:
        """A server stream read to its end (or until `until(streamed)` says stop, or until
        the connection breaks)."""
        streamed = Streamed()
        headers = {**CONNECT_STREAM_JSON, **self.headers}
        url = f"{base or self.base}/agent.v1.{method}"
        async with httpx2.AsyncClient(timeout=30) as client:
            try:
                async with client.stream(
                    "POST", url, content=envelope(message), headers=headers
                ) as response:
                    assert response.status_code == 200, await response.aread()
                    async for flags, data in envelopes(response.aiter_bytes()):
                        if flags & 0x02:
                            streamed.end = json.loads(data)
                            break
                        streamed.messages.append(json.loads(data))
                        if until is not None and until(streamed):
                            break
            except (httpx2.RemoteProtocolError, httpx2.ReadError):
                streamed.broken = True
        return streamed
