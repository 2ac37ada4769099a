"""The live stream of a session: every event of every run of it as server-sent events.

`GET /sessions/{id}/live?after=RUN_ID:SEQUENCE` (or the `Last-Event-ID` header EventSource
sends when it reconnects, which wins; neither: from the session's first event) follows the
session through `Operations.watch_session` — each run's log in order, the runs in the order
they started, the runs started later included, as WatchSessionEvents — and sends each event as
a chat item (chat.py) with `id: RUN_ID:SEQUENCE`, so a reconnect resumes right after the last
one received. A cursor is checked before the stream starts: one that is not of this form, or
names a run of another session, is a 400, as is a sequence its run never reached; another
tenant's session is a 404, like one that does not exist.

It does not end by itself: between runs it waits for the next. A comment line goes out after
each quiet spell (a dead connection is noticed), it ends when the client goes away, and with
the run tails when the server stops (web/live.py `LiveTails`, which counts both). A session
erased meanwhile ends it with `event: end` (the browser does not reconnect).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from behest.domain import events as ev
from behest.domain.callers import Caller
from behest.errors import BehestError, InvalidArgument, NotFound, OutOfRange
from behest.runs.operations import Operations
from behest.web import chat, views
from behest.web.auth import Gate
from behest.web.live import RETRY_MS, LiveTails, is_sequence, paced

log = logging.getLogger(__name__)

_MESSAGES = (ev.ToolMessageCommitted, ev.AssistantMessageCommitted)


class SessionTails:
    """The session pages' live streams (counted and closed with the runs' live tails)."""

    def __init__(self, runs: Operations, gate: Gate, live: LiveTails) -> None:
        self._runs = runs
        self._gate = gate
        self._live = live

    async def endpoint(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        session_id = str(request.path_params["session_id"])
        await self._runs.get_session(caller, session_id)  # another tenant's: not found
        value = request.headers.get("last-event-id") or request.query_params.get("after") or ""
        run_id, sequence = parse_cursor(value)
        if run_id:
            await self._check(caller, session_id, run_id, sequence)
        events = self._runs.watch_session(
            caller, session_id, after_run_id=run_id, after_sequence=sequence
        )
        return StreamingResponse(
            self._stream(caller, events),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _check(self, caller: Caller, session_id: str, run_id: str, sequence: int) -> None:
        """The cursor is an event of one of the session's runs, or refused."""
        try:
            run = await self._runs.get(caller, run_id)
        except NotFound:
            run = None
        if run is None or run.session_id != session_id:
            raise InvalidArgument(f"Last-Event-ID: {run_id} is not a run of this session")
        last = await self._runs.last_sequence(caller, run_id)
        if sequence > last:
            raise OutOfRange(f"Last-Event-ID: run {run_id} has no event {sequence} (last: {last})")

    async def _stream(self, caller: Caller, events: AsyncIterator[ev.Event]) -> AsyncIterator[str]:
        with self._live.held() as closing:
            yield f"retry: {RETRY_MS}\n\n"
            context, run_id = views.Context(), ""
            try:
                async for event in paced(events, closing, self._live.heartbeat_s):
                    if event is None:
                        yield ": still here\n\n"
                        continue
                    if event.run_id != run_id:  # runs do not interleave: one run's messages
                        context, run_id = views.Context(), event.run_id
                    await self._read_messages(caller, event, context)
                    data = json.dumps(chat.item(event, context).as_json())
                    yield f"id: {event.run_id}:{event.sequence}\nevent: item\ndata: {data}\n\n"
            except NotFound:  # the session was erased: nothing to reconnect to
                yield "event: end\ndata: {}\n\n"
            except BehestError as error:  # e.g. a storage fault: the browser reconnects
                log.warning("inspector: a session's live stream stopped: %s", error)

    async def _read_messages(self, caller: Caller, event: ev.Event, context: views.Context) -> None:
        """Read the run's messages at its start (its input), and again when an event names
        a message not read yet."""
        p = event.payload
        if isinstance(p, ev.RunStarted) or (
            isinstance(p, _MESSAGES) and p.message_id not in context.messages
        ):
            for message in await self._runs.run_messages(caller, event.run_id):
                context.messages[message.id] = message


def parse_cursor(value: str) -> tuple[str, int]:
    """`RUN_ID:SEQUENCE` as (run id, sequence); "" as ("", 0): from the session's start."""
    if not value:
        return "", 0
    run_id, _, sequence = value.rpartition(":")
    try:
        run = str(uuid.UUID(run_id))
    except ValueError:
        run = ""
    if not run or not is_sequence(sequence) or int(sequence) == 0:
        raise InvalidArgument(
            "after and Last-Event-ID must be RUN_ID:SEQUENCE, an event of the session"
        )
    return run, int(sequence)
