"""What the plain-HTTP doors (server-sent events, AG-UI) share: a guarded method called for a
request's caller, bounded JSON bodies, errors as Connect's JSON error with its HTTP status,
and server-sent events framed with heartbeats while a stream is quiet.

Errors come from the same place as on every door: a handler's abort (api/status.py's table)
or the codec's refusal, as a `ConnectError`; `error_response` writes it the way the Connect
protocol writes a unary error (`{"code": "not_found", "message": "…"}`, HTTP 404).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from connectrpc._protocol import ConnectWireError
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from behest.doors.calls import close_stream
from behest.doors.connect import JsonCodec

SSE_MEDIA_TYPE = "text/event-stream"
JSON_TYPE = "application/json"
# Answers of a door's stream carry these: no caching, no proxy buffering.
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}
_JSON = JsonCodec()


class UnsupportedMediaType(ConnectError):
    """A body in a content type the door does not read: HTTP 415, as the Connect door answers
    one (with Accept-Post), and a JSON error body that says what to send."""

    def __init__(self) -> None:
        message = "the request body must be JSON: send Content-Type: application/json"
        super().__init__(Code.INVALID_ARGUMENT, message)


def error_body(error: ConnectError) -> dict[str, Any]:
    """A refusal as Connect's JSON error (`{"code": "not_found", "message": "…"}`)."""
    return ConnectWireError(error.code, error.message, ()).to_dict()


def error_response(error: ConnectError) -> Response:
    """A refusal as Connect's JSON error body, with the HTTP status Connect gives its code."""
    wire = ConnectWireError(error.code, error.message, ())
    if isinstance(error, UnsupportedMediaType):
        return JSONResponse(error_body(error), status_code=415, headers={"accept-post": JSON_TYPE})
    return JSONResponse(error_body(error), status_code=wire.to_http_status().code)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's JSON body, read up to `max_bytes` (then refused); an empty one is refused.

    Only `Content-Type: application/json` is read: a page of another origin cannot send that
    without a CORS preflight (which only configured origins pass), whereas an HTML form can
    post text/plain anywhere."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != JSON_TYPE:
        raise UnsupportedMediaType
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise _too_large(max_bytes)
    except ClientDisconnect:
        raise ConnectError(Code.CANCELED, "the client went away") from None
    if not body.strip():
        raise ConnectError(Code.INVALID_ARGUMENT, "the request body is empty: send JSON")
    return bytes(body)


async def read_message(request: Request, message_class: Any, max_bytes: int) -> Any:
    """The request's JSON body as `message_class`, read up to `max_bytes` (then refused)."""
    return _JSON.decode(await read_body(request, max_bytes), message_class)


def _too_large(max_bytes: int) -> ConnectError:
    return ConnectError(Code.RESOURCE_EXHAUSTED, f"the request body is over {max_bytes} bytes")


def encode_json(message: Any) -> str:
    """A message as Connect's (protobuf's canonical) JSON, on one line."""
    return _JSON.encode(message).decode()


async def first_and_rest(stream: AsyncIterator[Any]) -> tuple[Any, AsyncIterator[Any]]:
    """The stream's first item (a refusal raises here, while an HTTP status can still say
    so) and the stream, that item first, for the response's body; closing that closes the
    stream (and so the guarded call, its stream slot with it). StopAsyncIteration: the
    stream ended without an item."""
    first = await anext(stream)

    async def rest() -> AsyncIterator[Any]:
        try:
            yield first
            async for item in stream:
                yield item
        finally:
            await close_stream(stream)

    return first, rest()


_END = object()


async def with_heartbeats(
    stream: AsyncIterator[Any], every_s: float, *, first_s: float | None = None
) -> AsyncIterator[Any]:
    """The stream's items, and None each time it has been quiet for `every_s` seconds (the
    first time after `first_s`, when given); its error, if it fails, after its items.

    One task of its own reads the stream, at most one item ahead, so the stream runs in one
    task from start to end (its context variables and cancel scopes stay its own) and a
    heartbeat never cuts into a read. Closing this closes the stream."""
    items: asyncio.Queue[tuple[Any, BaseException | None]] = asyncio.Queue(maxsize=1)

    async def read() -> None:
        try:
            async for item in stream:
                await items.put((item, None))
            await items.put((_END, None))
        except Exception as exc:  # handed over, raised by the reader of the items
            await items.put((_END, exc))
        finally:
            await close_stream(stream)

    reader = asyncio.create_task(read())
    taking: asyncio.Task[tuple[Any, BaseException | None]] | None = None
    quiet_s = every_s if first_s is None else first_s
    try:
        while True:
            if taking is None:
                taking = asyncio.create_task(items.get())
            done, _ = await asyncio.wait({taking}, timeout=quiet_s)
            quiet_s = every_s
            if not done:
                yield None
                continue
            (item, error), taking = taking.result(), None
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        for task in (taking, reader):
            if task is not None:
                task.cancel()
        # The reader closes the stream as it ends; wait for that unless cancelled meanwhile.
        await asyncio.wait({reader})


def sse_event(data: str, *, event_id: int | None = None, event: str = "") -> bytes:
    """One server-sent event; `data` may hold newlines (each line its own `data:`)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event:
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


SSE_HEARTBEAT = b": keep-alive\n\n"
