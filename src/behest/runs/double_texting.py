"""A new message on a session whose run is still active (double-texting): the request's
on_busy says what happens to the active run before the new one starts.

- REJECT (the default): nothing here; the creation is refused (Aborted) as before.
- INTERRUPT: the active run is cancelled (CancelSource NEW_RUN), keeping what it committed.
- ROLLBACK: as INTERRUPT, and then its messages leave the session's history (they stay the
  run's own: GetRunOutput, its events).
- ENQUEUE: nothing here; the store queues the run (store/sql/creation.py, runs/turns.py).
- STEER: no new run; the message waits for the active run to take it (runs/steering.py).

The new run's RunStarted names the run it cancelled and the policy; the cancelled run's
RunCancelled says a new run interrupted it. A run that ended otherwise meanwhile (it
completed) is left as it ended. A request whose client_request_id already made a run does
nothing here: a retry never cancels the run its first try started.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from behest.domain.callers import Caller
from behest.domain.runs import BusyPolicy, Cancel, CreatedRun, RunRequest, RunStatus
from behest.domain.spend import CancelSource
from behest.errors import FailedPrecondition
from behest.runs.executor import Executor
from behest.store.base import Store

REASON = "a new message on its session interrupted it"


async def make_room(
    store: Store, executor: Executor, caller: Caller, request: RunRequest
) -> RunRequest:
    """Cancel (and roll back) the session's active run as the request's policy says; the
    request, naming the run it cancelled."""
    if not request.on_busy.cancels or not request.session_id:
        return request
    key = request.client_request_id
    if key and await store.run_of_key(caller.tenant, key) is not None:
        return request  # a retry: its run exists (the creation finds it)
    session = await store.get_session(request.session_id)
    if session is None or session.tenant != caller.tenant or not session.active_run_id:
        return request  # the creation answers as without a policy
    active = session.active_run_id
    cancel = Cancel(caller.principal, REASON, CancelSource.NEW_RUN)
    try:
        ended = await executor.cancel(active, cancel)
    except FailedPrecondition:  # it completed or failed first: it stays as it ended
        return request
    if ended == RunStatus.CANCELLED and request.on_busy == BusyPolicy.ROLLBACK:
        await store.roll_back_run(active)
    return replace(request, interrupted_run_id=active)


async def steer(store: Store, caller: Caller, request: RunRequest) -> CreatedRun | RunRequest:
    """STEER: the message joins the session's active run (CreatedRun, `steered`); or, when
    there is none, the request to create as without a policy — and when the run is already
    ending (or a retry's key names a run), the request as ENQUEUE, queued after it."""
    queued = replace(request, on_busy=BusyPolicy.ENQUEUE)
    key = request.client_request_id
    if key and await store.run_of_key(caller.tenant, key) is not None:
        return queued  # a retry: the creation finds the run its key names
    session = await store.get_session(request.session_id or "")
    if session is None or session.tenant != caller.tenant or not session.active_run_id:
        return replace(request, on_busy=BusyPolicy.UNSPECIFIED)
    active = session.active_run_id
    named = (caller.tenant, key, queued.fingerprint()) if key else None
    added = await store.add_steer(active, request.input, now=datetime.now(UTC), key=named)
    run = await store.get_run(active)
    if added is None or run is None:
        return queued  # it is ending: the message starts the run after it
    return CreatedRun(run, created=False, steered=True)
