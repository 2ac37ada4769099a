"""POST /ag-ui: AG-UI 1.0's HTTP + server-sent events binding (docs/AG-UI.md).

A RunAgentInput's threadId is a behest session, its runId names the AG-UI run. Its new user
message starts a behest run on the session (CreateRunStream, the messages before it checked
against the session's first); its tool results and resume answers answer the calls the
session's newest run waits for (SubmitToolResults, SubmitApprovals), and the AG-UI run that
follows is that behest run's continuation (WatchRunEvents). An input whose conversation the
session already holds is one sent before: it is not applied again, its AG-UI run is sent
again after Last-Event-ID (behest's extension: every SSE event's `id:` is a behest sequence).

Every call goes through api/'s guarded methods for the caller of the Authorization header,
so auth, tenants, admission, bounds and the error table are the other doors'; a refusal
before the stream is an HTTP status with Connect's JSON error body, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ag_ui.core import RunAgentInput
from connectrpc.errors import ConnectError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from behest.api.auth import Authenticator
from behest.api.handlers import GuardedMethod
from behest.doors.agui_events import Translator
from behest.doors.agui_history import RUNS, Calls, History
from behest.doors.agui_input import (
    Plan,
    approvals,
    check_prior,
    mismatch,
    plan_of,
    read_input,
    run_request,
    tool_results,
)
from behest.doors.agui_stream import Follow, Segment
from behest.doors.agui_wire import enum_name
from behest.doors.callers import caller_of
from behest.doors.calls import refusal
from behest.doors.plain import (
    SSE_HEADERS,
    SSE_HEARTBEAT,
    SSE_MEDIA_TYPE,
    error_response,
    first_and_rest,
    read_body,
    with_heartbeats,
)
from behest.errors import BehestError, FailedPrecondition, InvalidArgument, NotFound

PATH = "/ag-ui"
RECENT_RUNS = 20  # how far back a re-sent input's run is looked for among the session's
WAITS = ("PENDING_CALL_KIND_APPROVAL", "PENDING_CALL_KIND_CLIENT_TOOL")


class AguiDoor:
    """The route, for the API's guarded methods and the gRPC side's Authenticator."""

    def __init__(
        self,
        services: Mapping[str, list[GuardedMethod]],
        authenticator: Authenticator,
        *,
        max_body_bytes: int,
        heartbeat_s: float,
    ) -> None:
        self._services = services
        self._auth = authenticator
        self._max_body_bytes = max_body_bytes
        self._heartbeat_s = heartbeat_s

    def routes(self) -> list[BaseRoute]:
        return [Route(PATH, self.endpoint, methods=["POST"])]

    async def endpoint(self, request: Request) -> Response:
        headers = list(request.headers.items())
        try:
            caller = caller_of(self._auth, headers)
            found = read_input(await read_body(request, self._max_body_bytes))
            after = last_event_id(request)
            follow, events = await self._begin(Calls(self._services, caller, headers), found, after)
        except BehestError as exc:
            return error_response(refusal(exc))
        except ConnectError as exc:
            return error_response(exc)
        return StreamingResponse(
            self._body(follow, events), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS
        )

    async def _body(self, follow: Follow, events: AsyncIterator[Any]) -> AsyncIterator[bytes]:
        async for frames in with_heartbeats(follow.frames(events), self._heartbeat_s):
            if frames is None:
                yield SSE_HEARTBEAT
            elif frames:
                yield b"".join(frames)

    async def _begin(
        self, calls: Calls, found: RunAgentInput, after: int
    ) -> tuple[Follow, AsyncIterator[Any]]:
        """Apply the input (unless it was applied before) and open what follows it; every
        refusal is raised here, before the response starts."""
        plan = plan_of(found)
        history = History(calls, found.thread_id)
        await history.load()
        if plan.user is not None:
            return await self._start(calls, found, plan, history, after)
        return await self._continue(calls, found, plan, history, after)

    async def _start(
        self, calls: Calls, found: RunAgentInput, plan: Plan, history: History, after: int
    ) -> tuple[Follow, AsyncIterator[Any]]:
        """A new user message: a behest run on the session (started by it when new)."""
        if not history.exists and plan.prior:
            raise NotFound(f"session {found.thread_id} not found")
        stored = history.turns()
        if len(plan.turns) <= len(stored) and not mismatch(plan.turns, stored):
            run_id = await self._run_of(calls, found)  # sent before: its run, again
            stream = calls.stream(f"{RUNS}/WatchRunEvents", {"runId": run_id})
        else:
            check_prior(plan, stored)
            stream = calls.stream(f"{RUNS}/CreateRunStream", run_request(found, plan))
        first, events = await first_and_rest(stream)
        segment = Segment(found.run_id, after=after)
        return self._follow(calls, found, history, first.run_id, segment), events

    async def _continue(
        self, calls: Calls, found: RunAgentInput, plan: Plan, history: History, after: int
    ) -> tuple[Follow, AsyncIterator[Any]]:
        """Answers: to the calls the session's newest run waits for, then its continuation."""
        if not history.exists:
            raise NotFound(f"session {found.thread_id} not found")
        stored = history.turns()
        where = mismatch(plan.prior, stored)
        if where or len(plan.prior) > len(stored):
            raise FailedPrecondition(
                where or "the input's conversation holds messages the thread does not"
            )
        listed = await calls.unary(
            f"{RUNS}/ListRuns", {"sessionId": found.thread_id, "pagination": {"limit": 1}}
        )
        if not listed.runs:
            raise FailedPrecondition(f"thread {found.thread_id} has no run to answer")
        run_id = listed.runs[0].id
        waiting: list[str] = []
        if plan.results:
            done = await calls.unary(f"{RUNS}/SubmitToolResults", tool_results(run_id, plan))
            waiting = list(done.waiting_call_ids)
        if plan.resume:
            done = await calls.unary(f"{RUNS}/SubmitApprovals", approvals(run_id, plan))
            waiting = list(done.waiting_call_ids)
        stream = calls.stream(f"{RUNS}/WatchRunEvents", {"runId": run_id})
        _, events = await first_and_rest(stream)
        segment = Segment(found.run_id, plan.answered, frozenset(waiting), after)
        return self._follow(calls, found, history, run_id, segment), events

    async def _run_of(self, calls: Calls, found: RunAgentInput) -> str:
        """The run an input sent before started: among the session's newest, the one whose
        metadata names the input's runId."""
        listed = await calls.unary(
            f"{RUNS}/ListRuns",
            {"sessionId": found.thread_id, "pagination": {"limit": RECENT_RUNS}},
        )
        for run in listed.runs:
            try:
                meta = json.loads(run.metadata or "{}")
            except ValueError:
                continue
            ag_ui = meta.get("ag_ui") if isinstance(meta, dict) else None
            if isinstance(ag_ui, dict) and ag_ui.get("runId") == found.run_id:
                return str(run.id)
        raise FailedPrecondition(
            f"thread {found.thread_id} holds this input's messages already, and none of its "
            f"recent runs is AG-UI run {found.run_id}: send the thread's history as it is now"
        )

    def _follow(
        self, calls: Calls, found: RunAgentInput, history: History, run_id: str, segment: Segment
    ) -> Follow:
        async def waiting_now() -> frozenset[str]:
            listed = await calls.unary(f"{RUNS}/ListPendingCalls", {"runId": run_id})
            return frozenset(c.call.id for c in listed.calls if enum_name(c, "kind") in WAITS)

        kept = [m for m in found.messages if m.role in ("system", "developer")]
        translator = Translator(thread_id=found.thread_id, run_id=found.run_id)
        return Follow(translator, segment, history=history, kept=kept, waiting_now=waiting_now)


def last_event_id(request: Request) -> int:
    """The Last-Event-ID header: the behest sequence the client has every event of."""
    value = request.headers.get("last-event-id", "").strip()
    if not value:
        return 0
    if not value.isdigit() or len(value) > 19:
        raise InvalidArgument(f"Last-Event-ID must be a behest event sequence, got {value!r}")
    return int(value)
