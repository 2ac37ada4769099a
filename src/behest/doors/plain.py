"""What the plain-HTTP doors (server-sent events, AG-UI) share: a guarded method called for a
request's caller, bounded JSON bodies, errors as Connect's JSON error with its HTTP status,
and server-sent events framed with heartbeats while a stream is quiet.

Errors come from the same place as on every door: a handler's abort (api/status.py's table)
or the codec's refusal, as a `ConnectError`; `error_response` writes it the way the Connect
protocol writes a unary error (`{"code": "not_found", "message": "…"}`, HTTP 404).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from connectrpc._protocol import ConnectWireError
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from behest.api.auth import act_as
from behest.api.handlers import GuardedMethod
from behest.domain.callers import Caller
from behest.doors.connect import DoorAbort, DoorContext, JsonCodec, connect_error

SSE_MEDIA_TYPE = "text/event-stream"
# Answers of a door's stream carry these: no caching, no proxy buffering.
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}
_JSON = JsonCodec()


def error_response(error: ConnectError) -> Response:
    """A refusal as Connect's JSON error body, with the HTTP status Connect gives its code."""
    wire = ConnectWireError(error.code, error.message, ())
    return JSONResponse(wire.to_dict(), status_code=wire.to_http_status().code)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's body, read up to `max_bytes` (then refused); an empty one is refused."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise ConnectError(
                    Code.RESOURCE_EXHAUSTED, f"the request body is over {max_bytes} bytes"
                )
    except ClientDisconnect:
        raise ConnectError(Code.CANCELED, "the client went away") from None
    if not body.strip():
        raise ConnectError(Code.INVALID_ARGUMENT, "the request body is empty: send JSON")
    return bytes(body)


async def read_message(request: Request, message_class: Any, max_bytes: int) -> Any:
    """The request's JSON body as `message_class`, read up to `max_bytes` (then refused)."""
    return _JSON.decode(await read_body(request, max_bytes), message_class)


def encode_json(message: Any) -> str:
    """A message as Connect's (protobuf's canonical) JSON, on one line."""
    return _JSON.encode(message).decode()


async def call_unary(
    method: GuardedMethod, request: Any, caller: Caller, headers: Iterable[tuple[str, str]]
) -> Any:
    """One guarded unary method for `caller`; a refusal raises ConnectError."""
    act_as(caller)
    try:
        return await method.handler(request, DoorContext(headers))
    except DoorAbort as abort:
        raise connect_error(abort.code, abort.message) from None


async def call_stream(
    method: GuardedMethod, request: Any, caller: Caller, headers: Iterable[tuple[str, str]]
) -> AsyncIterator[Any]:
    """One guarded server-streaming method for `caller`; a refusal raises ConnectError."""
    act_as(caller)
    stream = method.handler(request, DoorContext(headers))
    try:
        async for item in stream:
            yield item
    except DoorAbort as abort:
        raise connect_error(abort.code, abort.message) from None
    finally:
        await stream.aclose()


async def first_and_rest(stream: AsyncIterator[Any]) -> tuple[Any, AsyncIterator[Any]]:
    """The stream's first item (a refusal raises here, while an HTTP status can still say
    so) and the stream, that item first, for the response's body; closing that closes the
    stream (and so the guarded call, its stream slot with it)."""
    first = await anext(stream)

    async def rest() -> AsyncIterator[Any]:
        try:
            yield first
            async for item in stream:
                yield item
        finally:
            await _close(stream)

    return first, rest()


async def _close(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


async def with_heartbeats(stream: AsyncIterator[Any], every_s: float) -> AsyncIterator[Any]:
    """The stream's items, and None each time it has been quiet for `every_s` seconds."""
    pending: asyncio.Task[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            task, pending = pending, None
            try:
                item = task.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await _close(stream)


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
