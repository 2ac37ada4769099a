"""The inspector's pages (GET): runs, a run, pending calls, sessions, the dashboard, sign-in
(a session's page: session_page.py). Each reads through `Operations` for the signed-in
caller, so what a page shows is what the gRPC API would answer that caller (another tenant's
run: not found)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from behest.domain.callers import Caller
from behest.domain.runs import RunFilter, RunStatus
from behest.domain.waits import WaitKind
from behest.runs.operations import Operations
from behest.web import dashboard, formats, listing, questions, views
from behest.web.auth import Gate, SignInRequired
from behest.web.live import LiveTails
from behest.web.rendering import Renderer

EVENTS_PAGE = 200
SESSIONS_PAGE = 50
WAITING_SHOWN = 100


class Pages:
    def __init__(
        self,
        runs: Operations,
        gate: Gate,
        renderer: Renderer,
        live: LiveTails,
        open_streams: Callable[[str], int],
    ):
        self._runs = runs
        self._gate = gate
        self._render = renderer
        self._live = live
        self._open_streams = open_streams

    async def sign_in(self, request: Request) -> Response:
        try:
            caller = self._gate.caller(request)
        except SignInRequired:
            caller = None
        return self.sign_in_form(request, signed_in_as=caller)

    def sign_in_form(
        self,
        request: Request,
        *,
        status: int = 200,
        error: str = "",
        signed_in_as: Caller | None = None,
    ) -> Response:
        nonce, token = self._gate.sign_in_nonce()
        response = self._render.page(
            request,
            "signin.html",
            status=status,
            needs_token=self._gate.needs_token,
            signin_csrf=token,
            error=error,
            signed_in_as=signed_in_as,
        )
        self._gate.keep_sign_in_nonce(response, nonce)
        return response

    async def runs(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        wanted = listing.RunsForm.parse(request.query_params)
        start = number(request, "start", 0)
        page = await listing.find_runs(self._runs, caller, wanted, start=start)
        return self._render.page(
            request,
            "runs.html",
            caller=caller,
            runs=page.runs,
            wanted=wanted,
            query=wanted.query(),
            next_start=page.next_start,
            start=start,
            statuses=listing.STATUSES,
            now=datetime.now(UTC),
            duration=formats.duration,
        )

    async def run(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        return await self.run_page(request, caller, str(request.path_params["run_id"]))

    async def run_page(
        self,
        request: Request,
        caller: Caller,
        run_id: str,
        *,
        status: int = 200,
        refused: questions.Refused | None = None,
    ) -> Response:
        """A run's page; `refused`: an answer to one of its questions that was refused."""
        run = await self._runs.get(caller, run_id)
        last = await self._runs.last_sequence(caller, run_id)
        last_page = (max(last, 1) - 1) // EVENTS_PAGE * EVENTS_PAGE
        after = min(number(request, "after", last_page), last_page)
        events, more = await self._runs.events(caller, run_id, after=after, limit=EVENTS_PAGE)
        if events and events[-1].is_terminal and not run.status.is_terminal:
            run = await self._runs.get(caller, run_id)  # it ended meanwhile: its end is shown
        if more:  # the run grew past the pages counted a moment ago
            last_page = max(last_page, after + EVENTS_PAGE)
        context = views.Context.of(await self._runs.run_messages(caller, run_id))
        return self._render.page(
            request,
            "run.html",
            caller=caller,
            status=status,
            run=run,
            items=views.timeline(events, context),
            children=await self._runs.child_runs(caller, run_id),
            executions=await self._runs.tool_executions(caller, run_id),
            pending=await self._runs.pending_calls(caller, run_id),  # [] once it ended
            approval=WaitKind.APPROVAL,
            refused=refused,
            pages=_pages(after, last_page),
            live=not run.status.is_terminal and not more,
            shown_last=events[-1].sequence if events else after,
            last=last,
            duration=formats.duration(run, datetime.now(UTC)),
        )

    async def approvals(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        waiting = await self._runs.list_runs(
            caller, RunFilter(status=RunStatus.WAITING_FOR_INPUT, limit=WAITING_SHOWN)
        )
        calls = [c for run in waiting for c in await self._runs.pending_calls(caller, run.id)]
        return self._render.page(
            request, "approvals.html", caller=caller, calls=calls, approval=WaitKind.APPROVAL
        )

    async def sessions(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        start = number(request, "start", 0)
        found = await self._runs.list_sessions(caller, limit=SESSIONS_PAGE + 1, offset=start)
        return self._render.page(
            request,
            "sessions.html",
            caller=caller,
            sessions=found[:SESSIONS_PAGE],
            next_start=start + SESSIONS_PAGE if len(found) > SESSIONS_PAGE else None,
        )

    async def dashboard(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        board = await dashboard.dashboard(self._runs, caller, now=datetime.now(UTC))
        board.live_streams = self._live.open
        board.grpc_streams = self._open_streams(caller.tenant)
        return self._render.page(
            request, "dashboard.html", caller=caller, board=board, outcomes=dashboard.OUTCOMES
        )


def number(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name, "")
    return min(int(value), 2**62) if value.isdigit() else default


def _pages(after: int, last_page: int) -> dict[str, int | None]:
    """Links of the event pages around the one shown (`after` = where each page starts)."""
    return {
        "first": 0 if after > 0 else None,
        "previous": max(after - EVENTS_PAGE, 0) if after > 0 else None,
        "next": min(after + EVENTS_PAGE, last_page) if after < last_page else None,
        "last": last_page if after < last_page else None,
        "number": after // EVENTS_PAGE + 1,
        "count": last_page // EVENTS_PAGE + 1,
    }
