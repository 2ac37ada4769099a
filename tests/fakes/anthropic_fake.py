"""A scripted fake of Anthropic's Messages API (`POST /v1/messages`) on 127.0.0.1:0.

Streams speak the wire format of Anthropic's streaming reference: chunked `text/event-stream`
with `event: <type>` and `data: <json>` lines: message_start (a message object with usage),
content_block_start / content_block_delta (text_delta, input_json_delta) / content_block_stop,
message_delta (stop_reason, usage.output_tokens), message_stop, ping, and error events.
Errors are JSON bodies {"type": "error", "error": {"type", "message"}} with their status.

Each request takes the next scripted `Reply`; the fake records every request (headers with
lowercase names, the JSON body, the arrival time) and notices a client that closes the
connection before its reply is complete. Every reply says `Connection: close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests"}
_REASONS |= {500: "Internal Server Error", 529: "Overloaded"}
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One scripted response: SSE `events` (status 200), or a JSON `body` with `status`."""

    status: int = 200
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    pause_s: float = 0.0  # before each event
    cut_after: int | None = None  # close the connection after this many events


@dataclass(slots=True)
class Received:
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    closed_early: bool = False


class FakeAnthropic:
    """Serve with `async with FakeAnthropic() as fake:`; script with `fake.script(...)`."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.closed_early = asyncio.Event()
        self._replies: deque[Reply] = deque()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    def script(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    async def __aenter__(self) -> FakeAnthropic:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            received = await _read_request(reader)
            self.requests.append(received)
            reply = self._replies.popleft() if self._replies else _unscripted()
            if reply.events:
                await self._stream(reply, received, reader, writer)
            else:
                body = json.dumps(reply.body).encode()
                writer.write(_head(reply, "application/json", len(body)) + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _stream(
        self,
        reply: Reply,
        received: Received,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        writer.write(_head(reply, "text/event-stream; charset=utf-8", None))
        # The client sends nothing more: end of input means it closed the connection.
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            for sent, (name, data) in enumerate(reply.events):
                if sent == reply.cut_after:
                    return  # closed without the last chunk: the body is incomplete
                if reply.pause_s:
                    await asyncio.wait({hangup}, timeout=reply.pause_s)
                if hangup.done():
                    break
                chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            else:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                return
        except ConnectionError:
            pass
        finally:
            hangup.cancel()
        received.closed_early = True
        self.closed_early.set()


async def _read_request(reader: asyncio.StreamReader) -> Received:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(headers, json.loads(body or b"{}"), time.monotonic())


def _head(reply: Reply, content_type: str, length: int | None) -> bytes:
    headers = {
        "Content-Type": content_type,
        "request-id": f"req_fake{next(_ids):06d}",
        "Connection": "close",
        **reply.headers,
    }
    if length is None:
        headers["Cache-Control"] = "no-cache"
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = str(length)
    status = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}"
    return "\r\n".join([status, *(f"{k}: {v}" for k, v in headers.items()), "", ""]).encode()


def _unscripted() -> Reply:
    return error_reply(500, "api_error", "the fake has no scripted reply left")


# --- replies ------------------------------------------------------------------------------


def message_start(input_tokens: int) -> tuple[str, dict[str, Any]]:
    message: dict[str, Any] = {
        "id": f"msg_fake{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return ("message_start", {"type": "message_start", "message": message})


def text_block(index: int, chunks: list[str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": c},
                },
            )
            for c in chunks
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def tool_use_block(
    index: int, call_id: str, name: str, fragments: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        ),
        # The API's first input_json_delta of a block carries an empty string.
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f},
                },
            )
            for f in ["", *fragments]
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def message_end(stop_reason: str, output_tokens: int) -> list[tuple[str, dict[str, Any]]]:
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return [
        (
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": output_tokens}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def text_reply(
    *chunks: str, input_tokens: int = 21, output_tokens: int = 9, **options: Any
) -> Reply:
    """A streamed text answer, one text_delta per chunk."""
    events = [
        message_start(input_tokens),
        ("ping", {"type": "ping"}),
        *text_block(0, list(chunks)),
        *message_end("end_turn", output_tokens),
    ]
    return Reply(events=tuple(events), **options)


def tool_reply(
    *calls: tuple[str, str, list[str]],
    text: str = "",
    input_tokens: int = 40,
    output_tokens: int = 30,
) -> Reply:
    """A streamed answer: a text block if `text`, a tool_use block per (id, name, fragments)."""
    events = [message_start(input_tokens)]
    if text:
        events += text_block(0, [text])
    for index, (call_id, name, fragments) in enumerate(calls, start=1 if text else 0):
        events += tool_use_block(index, call_id, name, fragments)
    events += message_end("tool_use", output_tokens)
    return Reply(events=tuple(events))


def error_reply(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return Reply(status=status, body=body, headers=headers or {})


def stream_error_reply(*chunks: str, error_type: str = "overloaded_error") -> Reply:
    """A stream that starts an answer, then sends an `error` event instead of finishing."""
    error = {"type": "error", "error": {"type": error_type, "message": "Overloaded"}}
    return Reply(events=(message_start(10), *text_block(0, list(chunks))[:-1], ("error", error)))
