"""A tool's own check of executions whose outcome is unknown, asked before a person: a tool
with a `verify` (tools/base.py Verified) says whether the execution ran (and its result) or
did not; a check that cannot tell, fails or takes longer than the tool's timeout leaves the
question to a person (ReconcileToolExecution)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from behest.domain.executions import Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import Run
from behest.domain.waits import Answer
from behest.errors import describe
from behest.runs.executions import RunExecutions
from behest.runs.tool_calls import tool_context
from behest.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


async def checked(
    run: Run, tools: ToolRegistry, executions: RunExecutions, calls: Sequence[ToolCall]
) -> dict[str, Answer]:
    """The verdicts the calls' tools' checks give (by call id); those that cannot tell are
    left out."""
    verdicts: dict[str, Answer] = {}
    for call in calls:
        tool = tools.get(call.name)
        verify = getattr(tool, "verify", None)
        execution = executions.latest(call.id)
        if tool is None or verify is None or execution is None:
            continue
        arguments, problem = tools.arguments_of(call)
        if problem:
            continue
        try:
            said = await asyncio.wait_for(
                verify(arguments, tool_context(run, execution)), tool.timeout_s
            )
        except Exception as exc:  # a check that fails cannot tell: a person decides
            log.warning("the check of %s failed: %s", call.name, describe(exc))
            continue
        if said is None:
            continue
        if not said.ran:
            verdicts[call.id] = Answer(call_id=call.id, verdict=Verdict.DID_NOT_RUN)
            continue
        result = said.result
        text, is_error = (result.text, result.is_error) if result is not None else ("", False)
        verdicts[call.id] = Answer(
            call_id=call.id, verdict=Verdict.RAN, text=text, is_error=is_error
        )
    return verdicts
