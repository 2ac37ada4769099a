"""A run's model calls as the loop makes them: each retried on transient errors
(providers/retry.py) through one attempt at a time (runs/model_attempts.py); a context
overflow compacts the context and tries once more; compaction's own summary calls count like
the run's (usage, cost, budgets)."""

from __future__ import annotations

from behest.domain import events as ev
from behest.errors import ContextOverflowError, TransientProviderError
from behest.events.run_log import RunLog
from behest.observability.telemetry import current
from behest.providers.retry import RetryPolicy, reason, with_retries
from behest.runs.budget import Budget
from behest.runs.compactor import Compactor
from behest.runs.model_attempts import ModelAttempts
from behest.runs.progress import RunProgress
from behest.runs.turn import Turn


class ModelCalls:
    def __init__(
        self,
        *,
        attempts: ModelAttempts,
        retry: RetryPolicy,
        compactor: Compactor | None,
        progress: RunProgress,
        log: RunLog,
        budget: Budget,
    ) -> None:
        self._attempts = attempts
        self._retry = retry
        self._compactor = compactor
        self._progress = progress
        self._log = log
        self._budget = budget
        self._metrics = current().metrics

    async def compact(self) -> None:
        """Before a model call: compact the context if it is due."""
        if self._compactor is None:
            return
        progress = self._progress
        progress.adopt(
            await self._compactor.before_call(progress.transcript, progress.next_position)
        )
        await self._count_summaries()

    async def call(self) -> Turn:
        """One model call, retried on transient errors; a context overflow compacts the
        context and tries once more."""
        overflowed = False
        while True:
            try:
                return await with_retries(
                    self._attempts.attempt, self._retry, retried=self._retried
                )
            except ContextOverflowError as exc:
                if overflowed or self._compactor is None:
                    raise
                overflowed = True
                compacted = await self._compactor.after_overflow(
                    self._progress.transcript, self._progress.next_position
                )
                await self._count_summaries()
                if compacted is None:
                    raise ContextOverflowError(
                        exc.provider, f"{reason(exc)}; compacting the context failed"
                    ) from exc
                self._progress.adopt(compacted)

    def _retried(self, error: TransientProviderError) -> None:
        self._metrics.retried(error.provider, type(error).__name__)

    async def _count_summaries(self) -> None:
        assert self._compactor is not None
        for summary in self._compactor.take_spent():
            self._progress.add(summary.usage, summary.cost)
            await self._log.emit(ev.UsageRecorded(summary.usage, summary.cost))
            await self._budget.after_usage()
