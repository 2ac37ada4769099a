"""A small scripted HTTP/1.1 server on 127.0.0.1:0, shared by the fake model providers.

Each request takes the next `Reply` from a queue: a JSON body with any status and headers,
or a `text/event-stream` body sent as chunked SSE events (named with `event:` when they have
a name), optionally with a pause before each event, or cut off (connection closed without
the end of the body) after a few events. A reply whose headers say `Connection: close` ends
its connection; otherwise the connection is kept for the next request.

The server records every request and notices clients that close the connection before their
reply is complete (`closed_early` counts them, `disconnected` is set, and the request is
marked), which is how tests see a cancelled model call reach the wire.

    async with FakeOpenAI() as fake:
        fake.push(text("Hello there."))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Self

# Statuses some provider APIs send that http.HTTPStatus does not know.
_PHRASES = {529: "Overloaded"}


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: `event:` (if any) and `data:` lines, then a blank line."""

    data: str
    event: str = ""

    def encode(self) -> bytes:
        lines = [f"event: {self.event}"] if self.event else []
        lines += [f"data: {line}" for line in self.data.split("\n")]
        return ("\n".join(lines) + "\n\n").encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What the server sends for one request: a JSON body, or SSE events if `events`.

    `delay_s` is a pause before each event; `cut_after` closes the connection after that
    many events, without the end of the chunked body.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: object = None
    events: tuple[Event, ...] = ()
    delay_s: float = 0.0
    cut_after: int | None = None


@dataclass(slots=True)
class Request:
    """One request as received; `at` is the event loop's clock when it arrived.

    `closed_early` is set when the client hung up before its reply was complete.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    closed_early: bool = False

    def json(self) -> Any:
        return json.loads(self.body)


class SSEServer:
    """Serves scripted replies in order; `fallback` answers once the queue is empty.

    `path` is the one API path the fake serves (checked by `bodies`). A subclass may set
    `stream_content_type` and add headers to every reply with `reply_headers`.
    """

    stream_content_type = "text/event-stream"

    def __init__(self, fallback: Callable[[Request], Reply], *, path: str) -> None:
        self.requests: list[Request] = []
        self.closed_early = 0
        self.disconnected = asyncio.Event()
        self.path = path
        self._replies: deque[Reply] = deque()
        self._fallback = fallback
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.url = ""

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies of the requests, in order; each must be a POST to `path`."""
        assert all((r.method, r.path) == ("POST", self.path) for r in self.requests)
        return [r.json() for r in self.requests]

    def push(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def reply_headers(self, reply: Reply) -> dict[str, str]:
        """Headers every reply carries (before the reply's own); none here."""
        return {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                reply = self._replies.popleft() if self._replies else self._fallback(request)
                if not await self._send(reply, request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _send(
        self,
        reply: Reply,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Send one reply; False when the connection must not be reused."""
        headers = self.reply_headers(reply) | reply.headers
        keep_alive = headers.get("Connection", "").lower() != "close"
        if not reply.events:
            body = json.dumps(reply.body).encode()
            writer.write(_head(reply.status, {"Content-Type": "application/json"}, headers, body))
            await writer.drain()
            return keep_alive
        writer.write(_head(reply.status, {"Content-Type": self.stream_content_type}, headers, None))
        # The client sends nothing while it reads a reply: EOF here means it hung up.
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            for sent, event in enumerate(reply.events):
                if reply.cut_after is not None and sent >= reply.cut_after:
                    await writer.drain()
                    return False
                if reply.delay_s:
                    await asyncio.wait({hangup}, timeout=reply.delay_s)
                if _gone(hangup):
                    self._hung_up(request)
                    return False
                data = event.encode()
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return keep_alive
        except ConnectionError:
            self._hung_up(request)
            return False
        finally:
            hangup.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await hangup

    def _hung_up(self, request: Request) -> None:
        request.closed_early = True
        self.closed_early += 1
        self.disconnected.set()


def _gone(hangup: asyncio.Future[bytes]) -> bool:
    if not hangup.done():
        return False
    return hangup.exception() is not None or hangup.result() == b""


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, path, headers, body, asyncio.get_running_loop().time())


def _head(
    status: int, defaults: dict[str, str], headers: dict[str, str], body: bytes | None
) -> bytes:
    """The status line and headers; a body's length, or chunked when `body` is None."""
    headers = {**defaults, **headers}
    if body is None:
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = str(len(body))
    lines = [f"HTTP/1.1 {status} {_phrase(status)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _PHRASES.get(status, "Error")
