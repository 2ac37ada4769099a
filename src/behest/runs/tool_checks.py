"""A tool's own check of executions whose outcome is unknown, asked before a person: a tool
with a `verify` (tools/base.py Verified), or a worker tool declared verifiable (its worker is
sent a WorkerVerify), says whether the execution ran (and its result) or did not; a check
that cannot tell, fails or takes longer than the tool's timeout leaves the question to a
person (ReconcileToolExecution)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from behest.domain.executions import ToolExecution, Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import Run
from behest.domain.waits import Answer
from behest.domain.workers import VerifyRequest
from behest.errors import describe
from behest.runs.executions import RunExecutions
from behest.runs.tool_calls import tool_context
from behest.runs.worker_hub import WorkerHub
from behest.runs.worker_tools import WorkerTool
from behest.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


async def checked(
    run: Run,
    tools: ToolRegistry,
    executions: RunExecutions,
    calls: Sequence[ToolCall],
    workers: WorkerHub | None = None,
) -> dict[str, Answer]:
    """The verdicts the calls' tools' checks give (by call id): an in-process tool's verify,
    or a worker's that verifies its tool (one connected to this replica); those that cannot
    tell are left out."""
    verdicts: dict[str, Answer] = {}
    for call in calls:
        tool = tools.get(call.name)
        execution = executions.latest(call.id)
        if tool is None or execution is None:
            continue
        if isinstance(tool, WorkerTool):
            told = None
            if workers is not None and tool.spec.verifiable:
                told = await _worker_verdict(run, workers, tool, call, execution)
        else:
            told = await _tool_verdict(run, tools, call, execution)
        if told is not None:
            verdicts[call.id] = told
    return verdicts


async def _tool_verdict(
    run: Run, tools: ToolRegistry, call: ToolCall, execution: ToolExecution
) -> Answer | None:
    """An in-process tool's verify, asked (None: it has none, or it cannot tell)."""
    tool = tools.get(call.name)
    verify = getattr(tool, "verify", None)
    arguments, problem = tools.arguments_of(call)
    if tool is None or verify is None or problem:
        return None
    try:
        said = await asyncio.wait_for(
            verify(arguments, tool_context(run, execution)), tool.timeout_s
        )
    except Exception as exc:  # a check that fails cannot tell: a person decides
        log.warning("the check of %s failed: %s", call.name, describe(exc))
        return None
    if said is None:
        return None
    if not said.ran:
        return Answer(call_id=call.id, verdict=Verdict.DID_NOT_RUN)
    result = said.result
    text, is_error = (result.text, result.is_error) if result is not None else ("", False)
    return Answer(call_id=call.id, verdict=Verdict.RAN, text=text, is_error=is_error)


async def _worker_verdict(
    run: Run, workers: WorkerHub, tool: WorkerTool, call: ToolCall, execution: ToolExecution
) -> Answer | None:
    request = VerifyRequest(
        execution_id=execution.id,
        attempt=execution.attempt,
        idempotency_key=execution.idempotency_key,
        tool_name=call.name,
        arguments=call.arguments,
        run_id=run.id,
        call_id=call.id,
    )
    said = await workers.verify(run.tenant, request, tool.spec.timeout_s)
    if said is None:
        return None
    if not said.ran:
        return Answer(call_id=call.id, verdict=Verdict.DID_NOT_RUN)
    return Answer(call_id=call.id, verdict=Verdict.RAN, text=said.output, is_error=said.is_error)
