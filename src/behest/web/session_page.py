"""A session's page: its transcript as a chat, one turn per run (web/chat.py), beside its
runs and its forks; on its last page, followed live (web/session_live.py) from a cursor read
with it.

The cursor is the last event of the run that wrote the session's last message of its own (a
fork's history begins with its parent's) — the run started last, since a run writes its input
in its first step and runs do not interleave — read before the messages the page shows. So
whatever the page misses comes over the stream, and what it shows that the stream brings again
(the same message id) is dropped by the page.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from behest.domain import events as ev
from behest.domain.callers import Caller
from behest.domain.messages import Message
from behest.domain.runs import Run, RunFilter
from behest.errors import NotFound
from behest.runs.operations import Operations
from behest.web import chat, listing
from behest.web.auth import Gate
from behest.web.pages import number
from behest.web.rendering import Renderer

MESSAGES_PAGE = 100
FORKS_SHOWN = 50


class SessionPage:
    def __init__(self, runs: Operations, gate: Gate, renderer: Renderer) -> None:
        self._runs = runs
        self._gate = gate
        self._render = renderer

    async def page(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        session_id = str(request.path_params["session_id"])
        found = await self._runs.get_session(caller, session_id)
        start = number(request, "from", 0)
        messages, more = await self._messages(caller, session_id, start)
        live: str | None = None
        if not more and (messages or start == 0):  # the last page: it follows the session
            live = await self._cursor(caller, session_id, messages)
            # Read again: what came before the cursor is shown (or brought again, dropped).
            messages, more = await self._messages(caller, session_id, start)
            live = None if more else live
        runs = await self._runs.list_runs(
            caller, RunFilter(session_id=session_id, limit=listing.PAGE)
        )
        forks = await self._runs.list_sessions(
            caller, limit=FORKS_SHOWN + 1, offset=0, forks_of=session_id
        )
        return self._render.page(
            request,
            "session.html",
            caller=caller,
            session=found,
            turns=await self._turns(caller, messages, runs, start),
            next_from=messages[-1].position + 1 if more else None,
            runs=runs,
            forks=forks[:FORKS_SHOWN],
            more_forks=len(forks) > FORKS_SHOWN,
            live=live,
        )

    async def _messages(
        self, caller: Caller, session_id: str, start: int
    ) -> tuple[list[Message], bool]:
        return await self._runs.session_messages(
            caller, session_id, from_position=start, limit=MESSAGES_PAGE
        )

    async def _cursor(self, caller: Caller, session_id: str, messages: list[Message]) -> str:
        """`RUN_ID:SEQUENCE`, the session's last event now ("": before its first). A fork's
        history begins with messages it shares with its parent: their runs are not its own."""
        own = [m for m in messages if m.session_id == session_id]
        if not own:
            return ""
        run_id = own[-1].run_id
        return f"{run_id}:{await self._runs.last_sequence(caller, run_id)}"

    async def _turns(
        self, caller: Caller, messages: list[Message], runs: list[Run], start: int
    ) -> list[chat.Turn]:
        """The messages as turns, with each run's status and its RunStarted's notes."""
        known = {run.id: run for run in runs}
        started: dict[str, ev.RunStarted] = {}
        for run_id in dict.fromkeys(m.run_id for m in messages):
            try:
                if run_id not in known:  # older than the runs listed beside
                    known[run_id] = await self._runs.get(caller, run_id)
                first, _ = await self._runs.events(caller, run_id, after=0, limit=1)
            except NotFound:  # erased meanwhile
                continue
            if first and isinstance(first[0].payload, ev.RunStarted):
                started[run_id] = first[0].payload
        first_input = ""
        if start > 0 and messages:  # the page may begin in the middle of a run
            of_run = await self._runs.run_messages(caller, messages[0].run_id)
            first_input = of_run[0].id if of_run else ""
        return chat.turns(messages, runs=known, started=started, first_input=first_input)
