"""Plain server-sent events: a run's event stream for curl and the browser's EventSource.

`GET /v1/runs/{run_id}/events` follows a run through RunService's WatchRunEvents, after the
`Last-Event-ID` header (what EventSource sends when it reconnects, which wins) or `?after=N`;
`POST /v1/runs` takes a CreateRunRequest as JSON and answers with its run's stream through
CreateRunStream (idempotent with its `client_request_id`: the same key streams the same run,
from event 1). Both are the guarded methods the gRPC server serves (api/handlers.py): the same
admission, stream slots, request checks and error table, no second implementation.

Each event goes out as `id:` its sequence, `event:` its kind (the AgentEvent oneof's field
name, which is domain/events.py's KINDS name) and `data:` the AgentEvent as protobuf JSON; a
comment after each quiet spell of `sse_heartbeat_s`; the stream ends after the terminal
event. A reconnect after the end (its Last-Event-ID the last event) gets 204 No Content, which
tells EventSource to stop.

The caller is the `Authorization` header (doors/callers.py), or, for EventSource, which cannot
send headers, a stream ticket in `?ticket=` (runs/tickets.py; minted by CreateStreamTicket)
for that one run; a token is never taken from a URL.

A refusal before the first event (or the first heartbeat, within ACCEPT_S) is an HTTP status
with Connect's JSON error (doors/plain.py); one that comes later, once the headers are gone,
is a last `event: stream_error` whose data is that same JSON, without an id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from behest.api.auth import Authenticator
from behest.api.handlers import GuardedMethod
from behest.config import Settings
from behest.domain.callers import Caller
from behest.doors.callers import caller_of
from behest.doors.calls import call_stream, refusal
from behest.doors.plain import (
    SSE_HEADERS,
    SSE_HEARTBEAT,
    SSE_MEDIA_TYPE,
    encode_json,
    error_body,
    error_response,
    first_and_rest,
    read_message,
    sse_event,
    with_heartbeats,
)
from behest.errors import BehestError
from behest.runs.operations import Operations

log = logging.getLogger(__name__)

# How long the response's status waits for the stream's first event or refusal; after that
# the headers go out with a heartbeat (refusals come within milliseconds: a run looked up),
# whatever sse_heartbeat_s says.
ACCEPT_S = 1.0
# How long EventSource waits before it reconnects (its default is about 3 s).
RETRY_MS = 1000
MAX_SEQUENCE = 2**63 - 1
MAX_TICKET_CHARS = 200


class ServerSentEvents:
    """The routes of the server-sent events door, over RunService's guarded methods."""

    def __init__(
        self,
        services: Mapping[str, list[GuardedMethod]],
        authenticator: Authenticator,
        runs: Operations,
        *,
        heartbeat_s: float,
        read_max_bytes: int,
    ) -> None:
        methods = {method.name: method for method in services["agent.v1.RunService"]}
        self._watch = methods["WatchRunEvents"]
        self._create = methods["CreateRunStream"]
        self._authenticator = authenticator
        self._runs = runs
        self._heartbeat_s = heartbeat_s
        self._read_max_bytes = read_max_bytes

    @classmethod
    def of(
        cls,
        services: Mapping[str, list[GuardedMethod]],
        authenticator: Authenticator,
        runs: Operations,
        settings: Settings,
    ) -> ServerSentEvents:
        """The door as the settings have it."""
        return cls(
            services,
            authenticator,
            runs,
            heartbeat_s=settings.sse_heartbeat_s,
            read_max_bytes=settings.max_receive_message_bytes,
        )

    @property
    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/runs/{run_id}/events", self.events, methods=["GET"]),
            Route("/v1/runs", self.create, methods=["POST"]),
        ]

    async def events(self, request: Request) -> Response:
        """GET /v1/runs/{run_id}/events: the run's events after the cursor, then live."""
        if request.method != "GET":  # HEAD, which Starlette routes here: no stream to hold
            return Response(status_code=405, headers={"allow": "GET"})
        run_id = str(request.path_params["run_id"])
        try:
            caller = await self._caller(request, run_id)
            watch = self._watch.request_cls(run_id=run_id, last_event_id=cursor(request))
            return await self._respond(call_stream(self._watch, watch, caller, _headers(request)))
        except ConnectError as error:
            return error_response(error)

    async def create(self, request: Request) -> Response:
        """POST /v1/runs: a CreateRunRequest as JSON; its run's events from the first."""
        try:
            caller = self._header_caller(request)
            created = await read_message(request, self._create.request_cls, self._read_max_bytes)
            stream = call_stream(self._create, created, caller, _headers(request))
            return await self._respond(stream)
        except ConnectError as error:
            return error_response(error)

    async def _caller(self, request: Request, run_id: str) -> Caller:
        """The Authorization header's caller; without one, the stream ticket's."""
        ticket = request.query_params.get("ticket")
        if ticket is None or "authorization" in request.headers:
            return self._header_caller(request)
        if len(ticket) > MAX_TICKET_CHARS:
            message = "the stream ticket is not one this server issues"
            raise ConnectError(Code.UNAUTHENTICATED, message)
        try:
            return await self._runs.ticket_caller(ticket, run_id)
        except BehestError as exc:
            raise refusal(exc) from None
        except Exception:  # the store failed: logged (its digest at most, never the ticket)
            log.exception("a stream ticket could not be checked")
            message = "internal error: the stream ticket could not be checked (it is logged)"
            raise ConnectError(Code.INTERNAL, message) from None

    def _header_caller(self, request: Request) -> Caller:
        try:
            return caller_of(self._authenticator, request.headers.items())
        except BehestError as exc:
            raise refusal(exc) from None

    async def _respond(self, stream: AsyncIterator[Any]) -> Response:
        """The stream as server-sent events, once its first event (or heartbeat) is in: a
        refusal before then is the response's status; an empty stream is 204."""
        paced = with_heartbeats(stream, self._heartbeat_s, first_s=ACCEPT_S)
        try:
            _, rest = await first_and_rest(paced)
        except StopAsyncIteration:
            return Response(status_code=204, headers=SSE_HEADERS)
        return StreamingResponse(_frames(rest), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS)


async def _frames(items: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """Each AgentEvent as an event; None (a quiet spell) as a comment; a late refusal as a
    last `stream_error` event."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    try:
        async for event in items:
            if event is None:
                yield SSE_HEARTBEAT
                continue
            kind = event.WhichOneof("event") or ""
            yield sse_event(encode_json(event), event_id=event.sequence, event=kind)
    except ConnectError as error:
        yield sse_event(json.dumps(error_body(error), ensure_ascii=False), event="stream_error")


def cursor(request: Request) -> int:
    """Where to resume: Last-Event-ID (a reconnect), else ?after= (0: from the start)."""
    value = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not (value.isascii() and value.isdigit()) or len(value) > 19 or int(value) > MAX_SEQUENCE:
        raise ConnectError(
            Code.INVALID_ARGUMENT, "Last-Event-ID and after must be event sequence numbers"
        )
    return int(value)


def _headers(request: Request) -> list[tuple[str, str]]:
    return list(request.headers.items())
