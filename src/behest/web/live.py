"""The live tail of a run: its event log as server-sent events.

`GET /runs/{id}/live?after=N` (or the `Last-Event-ID` header EventSource sends when it
reconnects, which wins) follows the run through `Operations.watch` — backfill from the store,
then live commits, as WatchRunEvents — and sends each event as a timeline item (views.py) with
`id:` its sequence, so a reconnect resumes after the last one received, without a gap or a
repeat. Once the run has ended (after its terminal event, or at once when the cursor is its
last) it sends `event: end`, and the browser does not reconnect. A comment line goes out after
each quiet spell (a dead connection is noticed); every stream ends when the server stops.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from behest.domain import events as ev
from behest.domain.callers import Caller
from behest.errors import InvalidArgument
from behest.runs.operations import Operations
from behest.web import views
from behest.web.auth import Gate

HEARTBEAT_S = 15.0
RETRY_MS = 1000
MAX_SEQUENCE = 2**63 - 1
_MESSAGES = (ev.ToolMessageCommitted, ev.AssistantMessageCommitted)


class LiveTails:
    """The open live tails of this server (of runs, and of sessions: web/session_live.py);
    closed together (shutdown, or on purpose)."""

    def __init__(self, runs: Operations, gate: Gate, *, heartbeat_s: float = HEARTBEAT_S):
        self._runs = runs
        self._gate = gate
        self._heartbeat_s = heartbeat_s
        self._closing: set[asyncio.Event] = set()

    @property
    def open(self) -> int:
        return len(self._closing)

    @property
    def heartbeat_s(self) -> float:
        return self._heartbeat_s

    @contextmanager
    def held(self) -> Iterator[asyncio.Event]:
        """One open stream, counted while it lasts; its event is set to end it."""
        closing = asyncio.Event()
        self._closing.add(closing)
        try:
            yield closing
        finally:
            self._closing.discard(closing)

    def close_all(self) -> None:
        """End every open stream (browsers reconnect with Last-Event-ID, unless stopping)."""
        for closing in self._closing:
            closing.set()

    async def endpoint(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        run_id = str(request.path_params["run_id"])
        after = cursor(request)
        run = await self._runs.get(caller, run_id)
        if run.status.is_terminal:
            after = min(after, await self._runs.last_sequence(caller, run_id))
        context = views.Context.of(await self._runs.run_messages(caller, run_id))
        return StreamingResponse(
            self._stream(caller, run_id, after, context),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _stream(
        self, caller: Caller, run_id: str, after: int, context: views.Context
    ) -> AsyncIterator[str]:
        with self.held() as closing:
            yield f"retry: {RETRY_MS}\n\n"
            events = self._runs.watch(caller, run_id, after=after)
            async for event in paced(events, closing, self._heartbeat_s):
                if event is None:
                    yield ": still here\n\n"
                    continue
                if isinstance(event.payload, _MESSAGES):
                    await self._read_message(caller, run_id, event.payload.message_id, context)
                item = views.item(event, context)
                yield f"id: {event.sequence}\nevent: item\ndata: {json.dumps(item.as_json())}\n\n"
            if not closing.is_set():  # the run has ended (maybe before the cursor): no reconnect
                yield "event: end\ndata: {}\n\n"

    async def _read_message(
        self, caller: Caller, run_id: str, message_id: str, context: views.Context
    ) -> None:
        """Read the run's messages again when the stream shows one it has not read."""
        if message_id not in context.messages:
            for message in await self._runs.run_messages(caller, run_id):
                context.messages[message.id] = message


def cursor(request: Request) -> int:
    """Where to resume: Last-Event-ID (a reconnect), else ?after= (the page's last event)."""
    value = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not is_sequence(value):
        raise InvalidArgument("after and Last-Event-ID must be event sequence numbers")
    return int(value)


def is_sequence(value: str) -> bool:
    """An event's sequence number in ASCII digits (not "²", nor 5,000 digits)."""
    return value.isascii() and value.isdigit() and len(value) <= 19 and int(value) <= MAX_SEQUENCE


async def paced(
    events: AsyncIterator[ev.Event], closing: asyncio.Event, quiet_s: float
) -> AsyncIterator[ev.Event | None]:
    """The events, with None after each `quiet_s` without one; ends when `closing` is set."""
    closed: asyncio.Future[Any] = asyncio.ensure_future(closing.wait())
    pending: asyncio.Future[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            waiting: set[asyncio.Future[Any]] = {pending, closed}
            done, _ = await asyncio.wait(
                waiting, timeout=quiet_s, return_when=asyncio.FIRST_COMPLETED
            )
            if pending in done:
                finished, pending = pending, None
                try:
                    event = finished.result()
                except StopAsyncIteration:
                    return
                yield event
            elif closed in done:
                return
            else:
                yield None
    finally:
        closed.cancel()
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
