"""How one run's loop ends, decided with no await after the loop returns or raises: the
Ending to write, a Waiting pause, or None (a shutdown stopped it: it stays resumable)."""

from __future__ import annotations

import asyncio
import logging

from behest.domain.messages import Message
from behest.domain.runs import Run, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import FailureCode
from behest.errors import BehestError
from behest.events.run_log import RunLog
from behest.observability.trace_context import current_trace_ids
from behest.runs.agent_tools import HandedOff
from behest.runs.builder import LoopBuilder
from behest.runs.ending import Ending
from behest.runs.owned import OwnedRun
from behest.runs.progress import RunProgress
from behest.runs.waiting import Waiting

# Split out of the executor: its log lines keep the executor's logger, which operators filter by.
log = logging.getLogger("behest.runs.executor")


async def outcome(
    builder: LoopBuilder,
    run: Run,
    handle: OwnedRun,
    run_log: RunLog,
    snapshot: Snapshot | None,
    transcript: list[Message] | None,
) -> tuple[Ending | Waiting | None, RunProgress | None]:
    """How the run ends (None when a shutdown stops it: it stays resumable; Waiting when
    it waits for answers), and what it did (None if its loop could not even be built).

    The end is decided (handle.decided) with no await after the loop returns or raises:
    a cancel requested before that moment makes it RunCancelled, whatever the loop did.
    """
    progress = None
    try:
        if handle.cancel_requested:
            raise asyncio.CancelledError  # cancelled before its task started
        loop = await builder.loop(run, run_log, transcript)
        progress = loop.progress
        outcome = await loop.run(snapshot)
        while isinstance(outcome, HandedOff):  # the run goes on under another agent
            loop = await builder.loop(outcome.run, run_log, None)
            progress = loop.progress
            outcome = await loop.run(outcome.snapshot)
        if isinstance(outcome, Waiting) and not handle.cancel_requested:
            handle.decided = RunStatus.WAITING_FOR_INPUT
            return outcome, progress
        if isinstance(outcome, Waiting):
            raise asyncio.CancelledError
        ending = Ending.completed(outcome.finish_reason, outcome.iterations)
    except asyncio.CancelledError:
        if not handle.cancel_requested:
            return None, progress
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        ending = Ending.cancelled(handle.cancel)
    except BehestError as exc:
        ending = Ending.failed_by(exc)
    except Exception:
        trace_id, _ = current_trace_ids()
        log.exception("run %s crashed", run.id)
        ending = Ending.failed(f"internal error (trace id {trace_id})", FailureCode.INTERNAL)
    if handle.cancel_requested:
        ending = Ending.cancelled(handle.cancel)
    handle.decided = ending.status
    return ending, progress
