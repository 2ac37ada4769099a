"""A run's creation as the executor commits it: with its first step, in the group commit.

The creation (RunStarted as sequence 1, the user's message, the first snapshot) goes through
EventLog.create → Store.apply_batch, the one creation path. When its commit's outcome is lost
(a connection dropped after COMMIT), the run is read back: if it exists it was created, and it
is started from the store like any resumed run.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime

from opentelemetry import trace

from behest.domain.runs import CreatedRun, Run, RunRequest
from behest.errors import StorageFault, Unavailable
from behest.events.log import CommitUncertain, EventLog
from behest.observability.trace_context import traceparent_of
from behest.runs.start import first_step
from behest.store.base import Store
from behest.store.writes import NewRun, Write

log = logging.getLogger(__name__)


def new_run(
    request: RunRequest,
    run_id: str,
    span: trace.Span,
    *,
    tenant: str,
    owner: str,
    lease_until: datetime,
    refused_if_new: str = "",
) -> NewRun:
    """The creation of run `run_id` of `tenant`, traced by `span` and claimed by `owner`;
    with `refused_if_new`, only the run its client_request_id names (there is no room)."""
    ids = span.get_span_context()
    return NewRun(
        request=request,
        run_id=run_id,
        tenant=tenant,
        now=datetime.now(UTC),
        traceparent=traceparent_of(span),
        owner=owner,
        lease_until=lease_until,
        refused_if_new=refused_if_new,
        first_step=functools.partial(
            first_step,
            trace_id=format(ids.trace_id, "032x"),
            span_id=format(ids.span_id, "016x"),
            content=request.content,
            busy=(request.interrupted_run_id, request.on_busy),
        ),
    )


async def commit_creation(
    event_log: EventLog, store: Store, creation: NewRun
) -> tuple[CreatedRun, list[Write]] | Run:
    """The creation's outcome and its first step's writes, or the run read back when it was
    created but its outcome was lost."""
    for attempt in (1, 2):
        try:
            created, writes = await event_log.create(creation)
        except Exception as exc:
            found = await _read_back(store, creation.run_id)
            if found is not None:
                log.warning("run %s was created although its commit reported an error", found.id)
                return found
            if isinstance(exc, StorageFault):
                raise exc.refused("no run was created") from None
            if attempt == 2 or not isinstance(exc, CommitUncertain):
                raise
            continue  # nothing of it was written: ask again for the real answer
        if not created.created and created.run.id == creation.run_id:
            return created.run  # a retry found this very run: the first try committed
        return created, writes
    raise AssertionError("unreachable")


async def _read_back(store: Store, run_id: str) -> Run | None:
    try:
        return await store.get_run(run_id)
    except Exception:
        log.exception("could not tell whether run %s was created", run_id)
        raise Unavailable(
            f"could not tell whether run {run_id} was created: the store did not answer; "
            "retry with the same client_request_id to be safe"
        ) from None
