"""What one run does for its running tools: the RunSide a tool reaches through its context
(tools/context.py), registered per execution by runs/tool_calls.py.

It puts their questions to the run's user (runs/asking.py), tells the run's log how far they
got (runs/tool_progress.py) and answers their sampling requests with the run's model
(runs/sampling.py). Whatever it does for a call ends with the call: a sampling request still
being answered is cut (its model call cancelled; the server is told), and progress reports
after the result are dropped; so nothing of a call reaches the log after its result.
"""

from __future__ import annotations

import asyncio
from typing import Any

from behest.domain import events as ev
from behest.domain.runs import Run
from behest.domain.waits import Reply
from behest.events.run_log import RunLog
from behest.providers.base import Provider
from behest.providers.config import ProviderConfig
from behest.runs.asking import Asking
from behest.runs.budget import Budget
from behest.runs.progress import RunProgress
from behest.runs.sampling import RunSampling
from behest.runs.tool_progress import ProgressLog
from behest.tools.context import ToolContext
from behest.tools.sampling import SamplingRefused, SamplingReply, SamplingRequest


class ToolSide:
    """One run's side of its tools' questions, progress and sampling requests."""

    @classmethod
    def of_run(
        cls,
        asking: Asking,
        *,
        run: Run,
        log: RunLog,
        progress: RunProgress,
        provider: Provider,
        provider_config: ProviderConfig,
        budget: Budget,
    ) -> ToolSide:
        """The side of a run's agent loop (runs/loop.py), its questions put by `asking`."""
        sampling = RunSampling(
            run=run,
            log=log,
            progress=progress,
            provider=provider,
            provider_config=provider_config,
            budget=budget,
        )
        return cls(asking=asking, progress=ProgressLog(log), sampling=sampling)

    def __init__(
        self, *, asking: Asking, progress: ProgressLog, sampling: RunSampling | None
    ) -> None:
        self._asking = asking
        self._progress = progress
        self._sampling = sampling
        self._sampled: dict[str, set[asyncio.Task[SamplingReply]]] = {}  # by execution

    async def ask(self, context: ToolContext, message: str, schema: dict[str, Any]) -> Reply:
        return await self._asking.ask(context, message, schema)

    async def progress(
        self, context: ToolContext, done: float, total: float | None, message: str
    ) -> None:
        await self._progress.report(context, done, total, message)

    async def sample(self, context: ToolContext, request: SamplingRequest) -> SamplingReply:
        """The run model's answer, made in a task of its own that the call's end cuts (the
        asker's task may be the MCP connection's, which behest does not cancel)."""
        if self._sampling is None:
            raise SamplingRefused("this run does not answer sampling requests")
        answering = asyncio.create_task(
            self._sampling.sample(context, request), name="behest tool sampling"
        )
        mine = self._sampled.setdefault(context.execution_id, set())
        mine.add(answering)
        try:
            await asyncio.wait({answering})
        finally:
            mine.discard(answering)
            answering.cancel()  # the asker was cancelled: no answer is wanted
        if answering.cancelled():
            raise SamplingRefused("the tool's call ended before the run's model answered")
        return answering.result()

    async def settled(self, context: ToolContext) -> ev.ToolProgress | None:
        """The call has its result: its last progress report not yet told, to commit with
        it."""
        self._cut(context)
        return await self._progress.settled(context.execution_id)

    def ended(self, context: ToolContext) -> None:
        """The call is over, with a result or cut short: nothing more of it is done."""
        self._cut(context)
        self._progress.ended(context.execution_id)

    def _cut(self, context: ToolContext) -> None:
        for answering in self._sampled.pop(context.execution_id, ()):
            answering.cancel()
