"""Test support for the HTTP doors: a loopback TCP proxy the test can cut (the server's side of
a connection dropped mid-stream, as a restart or a balancer does), and a plain Connect client
over real HTTP (httpx2): unary JSON POSTs, and server streams read envelope by envelope."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

CONNECT_JSON = {"content-type": "application/json"}
CONNECT_STREAM_JSON = {"content-type": "application/connect+json"}


class CutProxy:
    """Forwards 127.0.0.1:port to a target; `cut()` closes every connection it carries."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> CutProxy:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            w.transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    writer.transport.abort()


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
