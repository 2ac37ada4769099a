"""How a run ends: the one writer of terminal steps (RunCompleted, RunFailed, RunCancelled).

A terminal step is one step of the event log: an error result for every tool call left
unanswered (so the session's transcript stays valid for its next run), the terminal event,
the run's final status, and its snapshot removed. It is awaited until durable; a failed write
is tried again from what the store holds, until it is durable or the server stops.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from behest.backoff import backoff_s
from behest.domain import events as ev
from behest.domain.messages import Message
from behest.domain.runs import Cancel, FinishReason, Run, RunStatus
from behest.domain.spend import FailureCode, Money, TokenUsage
from behest.errors import (
    BehestError,
    ContextOverflowError,
    Fenced,
    InvalidArgument,
    NotFound,
    ProviderAuthError,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    RunStopped,
    StorageFault,
    TransientProviderError,
)
from behest.events.log import EventLog
from behest.events.run_log import RunLog, step_not_stored
from behest.observability.telemetry import Telemetry, tracer
from behest.observability.trace_context import context_from_traceparent
from behest.runs.progress import Cut, RunProgress
from behest.runs.transcript import closing_results
from behest.store.base import Store
from behest.store.writes import AppendMessage, DeleteSnapshot, UpdateRun

log = logging.getLogger(__name__)

# The waits between tries to store a run's end (backoff.py): the first at most, the longest.
END_RETRY_FIRST_S = 0.1
END_RETRY_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class Ending:
    """A run's end: its terminal event and the final state that goes with it."""

    payload: ev.RunCompleted | ev.RunFailed | ev.RunCancelled
    status: RunStatus
    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    error: str = ""
    failure_code: FailureCode = FailureCode.UNSPECIFIED

    @staticmethod
    def completed(finish_reason: FinishReason, iterations: int) -> Ending:
        return Ending(
            ev.RunCompleted(finish_reason, iterations),
            RunStatus.COMPLETED,
            finish_reason=finish_reason,
        )

    @staticmethod
    def failed(error: str, code: FailureCode) -> Ending:
        return Ending(ev.RunFailed(error, code), RunStatus.FAILED, error=error, failure_code=code)

    @staticmethod
    def failed_by(exc: BehestError) -> Ending:
        """The end of a run that raised one of behest's errors (a store's fault met while
        awaiting a step itself said as the run's log says it)."""
        if isinstance(exc, StorageFault):
            exc = step_not_stored(exc)
        return Ending.failed(str(exc), failure_code(exc))

    @staticmethod
    def cancelled(cancel: Cancel) -> Ending:
        payload = ev.RunCancelled(cancel.by, cancel.reason, cancel.source)
        return Ending(payload, RunStatus.CANCELLED)

    @property
    def why(self) -> str:
        """Why a tool call was left unanswered, for its error result."""
        match self.payload:
            case ev.RunCancelled():
                return "the run was cancelled"
            case ev.RunFailed(error):
                return f"the run failed ({error})"
        return "the run ended"


def failure_code(exc: BehestError) -> FailureCode:
    """Why a run that raised `exc` failed: the one table of failure codes."""
    match exc:
        case RunStopped():
            return exc.code
        case StorageFault():
            return FailureCode.STORAGE
        case RateLimited() | QuotaExhausted():
            return FailureCode.RATE_LIMITED
        case ProviderAuthError():
            return FailureCode.AUTHENTICATION
        case ContextOverflowError():
            return FailureCode.CONTEXT_OVERFLOW
        case TransientProviderError():
            return FailureCode.PROVIDER_UNAVAILABLE
        case ProviderError():
            return FailureCode.PROVIDER_ERROR
        case InvalidArgument() | NotFound():  # its provider or model is no longer configured
            return FailureCode.CONFIGURATION
    return FailureCode.INTERNAL


@dataclass(frozen=True, slots=True)
class Spent:
    """What a run did, as its end records it."""

    iterations: int
    usage: TokenUsage
    cost: Money | None


class RunEnder:
    """Writes terminal steps through the event log."""

    def __init__(self, store: Store, event_log: EventLog) -> None:
        self._store = store
        self._log = event_log

    @property
    def fault(self) -> StorageFault | None:
        """Why writes do not land now (None: they do)."""
        return self._log.health.fault

    async def finish(
        self, run: Run, run_log: RunLog, ending: Ending, progress: RunProgress | None
    ) -> Ending:
        """Write the run's end, retried until durable: from what its owner knows (`progress`),
        or, without one or after a failed write, from what the store holds. Returns the end
        written: a completion whose earlier steps were not all stored fails instead."""
        messages = None if run_log.failed or progress is None else progress.transcript
        cut = progress.cut if progress is not None and ending.status == RunStatus.CANCELLED else {}
        position = 0 if progress is None else progress.next_position
        iterations = run.iterations if progress is None else progress.iteration
        usage = run.usage if progress is None else progress.usage
        cost = run.cost if progress is None else progress.cost
        for attempt in itertools.count(1):
            try:
                if messages is None:
                    await run_log.resync(self._store)
                    messages = await self._store.session_messages(run.session_id)
                    position = messages[-1].position + 1 if messages else 0
                spent = Spent(iterations, usage, cost)
                ending = _truthful(ending, run_log)
                await self._write(run, run_log, ending, messages, position, spent, cut)
                return ending
            except Fenced:
                raise  # another node holds the run now: its end is that node's to write
            except Exception:
                messages = None
                delay = backoff_s(attempt, initial_s=END_RETRY_FIRST_S, max_s=END_RETRY_MAX_S)
                log.warning(
                    "run %s: storing its end failed (try %d); trying again in %.2f s",
                    run.id,
                    attempt,
                    delay,
                    exc_info=True,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def end_stored(self, run: Run, ending: Ending, generation: int) -> None:
        """End a run no task executes (interrupted, or never resumed), from the store, under
        this node's claim `generation`."""
        with tracer().start_as_current_span(
            "behest.run.end",
            context=context_from_traceparent(run.traceparent),
            record_exception=False,
        ):
            # Without progress, finish reads where the log ends and the transcript first.
            run_log = self._log.open_run(run.id, last_sequence=0, generation=generation)
            await self.finish(run, run_log, ending, None)

    async def _write(
        self,
        run: Run,
        run_log: RunLog,
        ending: Ending,
        messages: list[Message],
        position: int,
        spent: Spent,
        cut: Mapping[str, Cut],
    ) -> None:
        """The terminal step, awaited until durable: calls cut by a cancel said so (their
        records OUTCOME_UNKNOWN), every call left unanswered given an error result."""
        closing = closing_results(
            messages, run_id=run.id, session_id=run.session_id, reason=ending.why, position=position
        )
        cuts = [
            ev.ToolExecutionFinished(call_id, c.tool_name, int(c.seconds * 1000), True, True)
            for call_id, c in cut.items()
        ]
        final = UpdateRun(
            run_id=run.id,
            status=ending.status,
            iterations=spent.iterations,
            usage=spent.usage,
            finish_reason=ending.finish_reason,
            error=ending.error,
            failure_code=ending.failure_code,
            cost=spent.cost,
        )
        done = await run_log.emit(
            *cuts,
            *[ev.ToolMessageCommitted(m.id) for m in closing],
            ending.payload,
            state=[
                *(c.record for c in cut.values()),
                *(AppendMessage(m) for m in closing),
                final,
                DeleteSnapshot(run.id),
            ],
            final=True,
        )
        await asyncio.shield(done)


def _truthful(ending: Ending, run_log: RunLog) -> Ending:
    """A run never ends COMPLETED when a step before its end was lost (its answer, its usage
    or its text may be missing from the log): it fails naming the store's fault. Its
    terminal step commits only after every earlier one (EventLog._broken), so a lost step is
    known here by the time a COMPLETED end could land."""
    if ending.status != RunStatus.COMPLETED or run_log.lost is None:
        return ending
    return Ending.failed(
        f"the run finished, but its answer could not be stored: {run_log.lost}",
        FailureCode.STORAGE,
    )


def record_end(ending: Ending, telemetry: Telemetry, span: trace.Span | None = None) -> None:
    """Count a run's durable end in the metrics, and tell it on the run's span."""
    outcome = ending.status.name.lower()  # completed | failed | cancelled
    telemetry.metrics.run_finished(outcome, ending.failure_code)
    if span is None:
        return
    span.set_attribute("behest.outcome", outcome)
    if ending.status == RunStatus.FAILED:
        code = ending.failure_code.name.lower()
        span.set_attribute("behest.failure_code", code)
        # A run's error may quote what the model sent (a doom loop's arguments): content.
        words = ending.error if telemetry.trace_content else f"the run failed: {code}"
        span.set_status(Status(StatusCode.ERROR, words))
