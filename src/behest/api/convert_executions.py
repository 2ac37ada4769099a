"""Tool executions (domain/executions.py) as agent.v1.ToolExecution, and a reconcile request
checked into the answer it gives."""

from __future__ import annotations

from typing import cast

from behest._proto.agent.v1 import execution_pb2 as pb
from behest.api.answers import MAX_REASON_BYTES, MAX_RESULT_BYTES
from behest.api.convert import timestamp
from behest.api.fields import bounded
from behest.domain.executions import ToolExecution, Transition, Verdict
from behest.domain.waits import Answer
from behest.errors import InvalidArgument


def execution(value: ToolExecution) -> pb.ToolExecution:
    return pb.ToolExecution(
        id=value.id,
        run_id=value.run_id,
        call_id=value.call_id,
        tool_name=value.tool_name,
        source=value.source,
        attempt=value.attempt,
        status=cast(pb.ToolExecutionStatus.ValueType, int(value.status)),
        executor=value.executor,
        started_at=timestamp(value.started_at),
        ended_at=timestamp(value.ended_at) if value.ended_at is not None else None,
        result=value.result,
        is_error=value.is_error,
        result_digest=value.result_digest,
        idempotency_key=value.idempotency_key,
        idempotent=value.idempotent,
        verdict=cast(pb.ReconcileVerdict.ValueType, int(value.verdict or 0)),
        transitions=[transition(t) for t in value.transitions],
    )


def transition(value: Transition) -> pb.ToolExecutionTransition:
    return pb.ToolExecutionTransition(
        status=cast(pb.ToolExecutionStatus.ValueType, int(value.status)),
        at=timestamp(value.at),
        actor=value.actor,
        reason=value.reason,
    )


def reconcile_answer(request: pb.ReconcileToolExecutionRequest) -> Answer:
    """The verdict a ReconcileToolExecution brings, checked and bounded."""
    if request.verdict not in tuple(Verdict):
        raise InvalidArgument(
            "verdict must be RECONCILE_VERDICT_RAN (with its output), _DID_NOT_RUN (run it "
            "again) or _GIVE_UP (the model gets an error)"
        )
    verdict = Verdict(request.verdict)
    bounded(request.output, "output", MAX_RESULT_BYTES)
    bounded(request.reason, "reason", MAX_REASON_BYTES)
    if verdict != Verdict.RAN and (request.output or request.is_error):
        raise InvalidArgument(
            f"output and is_error go with RECONCILE_VERDICT_RAN, not {verdict.name}"
        )
    text = request.output if verdict == Verdict.RAN else request.reason
    return Answer(call_id="", verdict=verdict, text=text, is_error=request.is_error)
