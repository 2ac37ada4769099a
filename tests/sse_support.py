"""Support for the server-sent events tests: a reader of `text/event-stream` over a real HTTP
client (httpx2), and a TCP proxy that drops a connection from the server's side mid-stream.

The proxy stands between a client (httpx2, or headless Chromium) and behest's HTTP listener,
passing bytes both ways and keeping what each connection sent (so a test can see every
request line and header a client sent). Armed with `drop_after(n)`, it aborts the connection
that carries the n-th event (`id:` line) after arming: to the client the server went away,
mid-run, and the test can watch it come back without sleeping for anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx2
from google.protobuf.json_format import MessageToDict

from behest._proto.agent.v1 import run_pb2 as pb
from behest.config import Settings
from tests.support import Server, collect, kind, script, start_server, stop_server
from tests.web_support import ALICE, bearer, inspector_settings

# An origin the test servers let call the doors from a browser.
ALLOWED_ORIGIN = "https://app.example.test"
HEARTBEAT_S = 0.1
TIMEOUT = httpx2.Timeout(20.0)
CALCULATOR = {"name": "calculator", "arguments": {"expression": "2+2"}}
# A run that asks to use the calculator, waits for the approval, then talks for a while.
WAITS_THEN_TALKS = script(
    {"tool_calls": [CALCULATOR]},
    {"text": "one two three four five six seven eight", "delay_ms": 20},
)
TERMINAL = {"run_completed", "run_failed", "run_cancelled"}

_ID_LINE = re.compile(rb"(?m)^id: ")


@dataclass
class Event:
    """One server-sent event as EventSource dispatches it."""

    id: str
    event: str
    data: str

    @property
    def sequence(self) -> int:
        return int(self.id)

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Stream:
    """What one response of a stream carried, and how it ended."""

    status: int
    headers: dict[str, str]
    events: list[Event] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)
    body: str = ""  # the body of an answer that is not a stream
    dropped: bool = False  # the connection broke before the body ended

    @property
    def last_id(self) -> str:
        return self.events[-1].id if self.events else ""


async def read_stream(
    client: httpx2.AsyncClient,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
    until: Any = None,
) -> Stream:
    """One request, its stream read until it ends, breaks, or `until(stream)` is true."""
    request = client.build_request(method, url, headers=headers, json=json_body)
    response = await client.send(request, stream=True)
    stream = Stream(response.status_code, dict(response.headers))
    try:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            stream.body = (await response.aread()).decode()
            return stream
        await _parse(response, stream, until)
    except httpx2.TransportError:
        stream.dropped = True
    finally:
        await response.aclose()
    return stream


async def _parse(response: httpx2.Response, stream: Stream, until: Any) -> None:
    fields: dict[str, list[str]] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields:
                stream.events.append(
                    Event(
                        id=fields.get("id", [""])[-1],
                        event=fields.get("event", ["message"])[-1],
                        data="\n".join(fields["data"]),
                    )
                )
            fields = {}
            if until is not None and until(stream):
                return
            continue
        if line.startswith(":"):
            stream.comments.append(line[1:].strip())
            if until is not None and until(stream):
                return
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "retry":
            stream.retry.append(value)
        else:
            fields.setdefault(name, []).append(value)


@dataclass
class Connection:
    """One client connection through the proxy: what the client sent, what it was sent."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)
    dropped: bool = False


class DroppingProxy:
    """A TCP proxy to 127.0.0.1:`port` that drops a connection when told to (see module doc)."""

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


# --- a server with the HTTP doors ------------------------------------------------------------


def sse_settings(data_dir: Any, database_url: str = "", **overrides: object) -> Settings:
    """The inspector's settings (bearer tokens of two tenants) with the doors' own."""
    values: dict[str, object] = {
        "http_cors_origins": [ALLOWED_ORIGIN],
        "sse_heartbeat_s": HEARTBEAT_S,
        **overrides,
    }
    if database_url:
        values["database_url"] = database_url
    return inspector_settings(data_dir, **values)


@dataclass
class Web:
    """A running server and the base URL of its HTTP listener."""

    server: Server

    @property
    def port(self) -> int:
        web = self.server.app.web
        assert web is not None
        return web.port

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def start_web(settings: Settings) -> Web:
    return Web(await start_server(settings))


async def stop_web(web: Web) -> None:
    await stop_server(web.server)


def auth(token: str = ALICE, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", **headers}


def create_body(input: str, *, model: str = "script", **fields: Any) -> dict[str, Any]:
    """A CreateRunRequest as JSON (the proto's field names; Connect's camelCase work too)."""
    return {"provider": {"value": "local"}, "model": {"value": model}, "input": input, **fields}


async def stored_events(web: Web, run_id: str, token: str = ALICE) -> list[Event]:
    """The run's whole log through gRPC, as the SSE door should send it."""
    events = await collect(
        web.server.runs.WatchRunEvents(
            pb.WatchRunEventsRequest(run_id=run_id), metadata=bearer(token)
        )
    )
    return [
        Event(str(e.sequence), kind(e), json.dumps(MessageToDict(e), separators=(",", ":")))
        for e in events
    ]


async def approve(web: Web, run_id: str, call_id: str = "call_1_1") -> None:
    answer = pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW)
    request = pb.SubmitApprovalsRequest(run_id=run_id, approvals=[answer])
    await web.server.runs.SubmitApprovals(request, metadata=bearer(ALICE))


async def run_ids(web: Web, token: str = ALICE) -> list[str]:
    listed = await web.server.runs.ListRuns(pb.ListRunsRequest(), metadata=bearer(token))
    return [run.id for run in listed.runs]


def assert_whole(events: list[Event], stored: list[Event]) -> None:
    """Events 1..N, each once, in order, and exactly the stored ones; the last is terminal."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [(e.id, e.event, e.json()) for e in events] == [
        (e.id, e.event, e.json()) for e in stored
    ]
    assert events[-1].event in TERMINAL
