"""Ending a run from outside its loop: CancelRun and DeleteSnapshot (abandon), wherever the
run executes — here (its task is told), on another node (the cancel is stored with the run and
signalled to that node, whose loop ends it), or nowhere (interrupted or waiting: the run is
claimed here and its end written from the store). Nothing is answered before the run's end is
durable and known.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from behest.domain.runs import Cancel, Run, RunStatus
from behest.domain.spend import CancelSource, FailureCode
from behest.errors import (
    Aborted,
    BehestError,
    DeadlineExceeded,
    FailedPrecondition,
    Fenced,
    NotFound,
    Unavailable,
)
from behest.events.notify import Notifier
from behest.runs.ending import Ending, RunEnder
from behest.runs.leases import Leases
from behest.runs.owned import Held, OwnedRun
from behest.store.base import Store

log = logging.getLogger(__name__)

# How long CancelRun waits for the run's end to be durable before saying it is not yet.
CANCEL_WAIT_S = 10.0
# Times CancelRun starts over when the run changed hands while it waited (a lost claim).
_CANCEL_TRIES = 3
# How often a CancelRun of a run another node executes looks again without a notification.
_CANCEL_POLL_S = 0.5


class Cancelling:
    """CancelRun and abandon for the executor, over the runs it holds."""

    def __init__(
        self,
        *,
        store: Store,
        runs: Held,
        leases: Leases,
        notifier: Notifier,
        ender: RunEnder,
        ended: Callable[[Ending], None],
        accepting: Callable[[], bool],
    ) -> None:
        """`ended` counts a durable end; `accepting` says whether the server still runs."""
        self._store = store
        self._runs = runs
        self._leases = leases
        self._notifier = notifier
        self._ender = ender
        self._ended = ended
        self._accepting = accepting

    async def cancel(self, run_id: str, cancel: Cancel) -> RunStatus:
        """Cancel a run; returns CANCELLED once RunCancelled is durable (or was already).

        A run whose end was decided otherwise first (it completed or failed) is
        FailedPrecondition naming that end; an end not durable within CANCEL_WAIT_S is
        DeadlineExceeded. Nothing is answered before the run's end is known.
        """
        for _ in range(_CANCEL_TRIES):
            run = await self._store.get_run(run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            handle = self._runs.get(run_id)
            if handle is None:
                if run.status.is_terminal:
                    return _cancelled(run_id, run.status)
                if self._leases.is_elsewhere(run):
                    final = await self._cancel_elsewhere(run, cancel)
                else:
                    final = await self._end_unowned(run, Ending.cancelled(cancel))
            else:
                handle.request_cancel(cancel)
                try:
                    final = await handle.wait_end(run_id, CANCEL_WAIT_S)
                except DeadlineExceeded as exc:
                    raise self._why_late(exc) from None
            if final is not None:
                status = _cancelled(run_id, final)
                await self._cancel_children(run_id, cancel)
                return status
            if not self._accepting():
                raise Unavailable(
                    f"the server is shutting down: run {run_id} was stopped without an end "
                    "and resumes at the next start; cancel it then"
                )
        raise Aborted(f"run {run_id} changed hands while it was being cancelled; try again")

    async def _cancel_elsewhere(self, run: Run, cancel: Cancel) -> RunStatus | None:
        """Cancel a run another node executes: the cancel is stored and signalled to it, and
        its end awaited (None: the run is nobody's now; the caller tries again). Its owner
        ends it, or whoever takes it up if that node is gone."""
        if not await self._store.request_cancel(run.id, cancel, now=datetime.now(UTC)):
            return None  # it ended meanwhile: read again
        try:
            async with asyncio.timeout(CANCEL_WAIT_S):
                while True:
                    ticket = self._notifier.ticket(run.id)
                    current = await self._store.get_run(run.id)
                    if current is None or current.status.is_terminal:
                        return None if current is None else current.status
                    if not self._leases.is_elsewhere(current):
                        return None  # its owner let it go (or died): end it here
                    await self._notifier.wait(ticket, _CANCEL_POLL_S)
        except TimeoutError:
            raise DeadlineExceeded(
                f"run {run.id}: the cancel is recorded, but node {run.owner!r}, which executes "
                f"the run, did not end it within {CANCEL_WAIT_S:g} s; it ends cancelled when "
                "that node or the next to take the run up gets to it (GetRun tells)"
            ) from None

    def _why_late(self, late: DeadlineExceeded) -> DeadlineExceeded:
        """A run's end that was not durable in time, and why, when the database says."""
        fault = self._ender.fault
        return late if fault is None else DeadlineExceeded(f"{late} (now: {fault})")

    async def cancels_asked(self, run_ids: Iterable[str]) -> None:
        """Cancels asked through other nodes of runs this one executes: each is ended so."""
        for run_id in run_ids:
            handle = self._runs.get(run_id)
            if handle is None or handle.cancel_requested or handle.decided is not None:
                continue
            run = await self._store.get_run(run_id)
            if run is not None and run.cancel_request is not None:
                handle.request_cancel(run.cancel_request)

    async def _cancel_children(self, run_id: str, cancel: Cancel) -> None:
        """Cancel the sub-agent runs a cancelled run started (and theirs, in turn)."""
        why = Cancel(cancel.by, f"its parent run {run_id} was cancelled", CancelSource.PARENT_RUN)
        for child in await self._store.child_runs(run_id):
            if child.status.is_terminal:
                continue
            try:
                await self.cancel(child.id, why)
            except BehestError as exc:  # it ended meanwhile, or another node holds it
                log.warning("run %s: cancelling sub-agent run %s: %s", run_id, child.id, exc)

    async def abandon(self, run_id: str) -> None:
        """Give up an interrupted run (RunFailed "abandoned"); a running one cannot be."""
        run = await self._store.get_run(run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        if run_id in self._runs:
            raise FailedPrecondition(f"run {run_id} is executing; cancel it with CancelRun instead")
        if self._leases.is_elsewhere(run):
            raise FailedPrecondition(
                f"run {run_id} is executing on node {run.owner!r}; cancel it with CancelRun instead"
            )
        if run.status.is_terminal:
            raise FailedPrecondition(f"run {run_id} already ended ({run.status.name})")
        reason = "abandoned: its snapshot was deleted while the run was interrupted"
        final = await self._end_unowned(run, Ending.failed(reason, FailureCode.ABANDONED))
        if final != RunStatus.FAILED:
            raise FailedPrecondition(f"run {run_id} ended {final.name if final else 'elsewhere'}")

    async def _end_unowned(self, run: Run, ending: Ending) -> RunStatus | None:
        """End a run no task of this process owns; returns how it ended (None: it vanished).
        The run is held as ours while its end is written, so no start, resume or second end
        of it can interleave; it is read again once held."""
        handle = self._runs.hold(run.id, OwnedRun(run.tenant, started=True, decided=ending.status))
        try:
            # Claimed first: a node taking up a waiting run, or adopting a lapsed one, now
            # cannot write into it while its end is written here.
            claimed = await self._leases.claim(run.id)
            current = await self._store.get_run(run.id)
            if current is None or current.status.is_terminal:
                handle.final = None if current is None else current.status
                return handle.final
            if not claimed:
                return None  # another node holds it now: the caller asks again
            handle.generation = claimed
            try:
                async with asyncio.timeout(CANCEL_WAIT_S):
                    await self._ender.end_stored(current, ending, claimed)
            except TimeoutError:
                raise self._why_late(
                    DeadlineExceeded(
                        f"the end of run {run.id} was not durable within {CANCEL_WAIT_S:g} s; "
                        "GetRun tells whether it was written"
                    )
                ) from None
            except Fenced:
                return None  # another node claimed it meanwhile: the caller asks again
            handle.final = ending.status
            self._ended(ending)
            return handle.final
        finally:
            self._runs.release(run.id, handle, "its end could not be written")


def _cancelled(run_id: str, final: RunStatus) -> RunStatus:
    """CANCELLED, or FailedPrecondition naming the end the run reached instead."""
    if final == RunStatus.CANCELLED:
        return final
    raise FailedPrecondition(f"run {run_id} already ended {final.name}; it was not cancelled")
