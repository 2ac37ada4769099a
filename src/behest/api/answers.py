"""What SubmitApprovals, SubmitToolResults, SubmitElicitationAnswers and CancelRun bring:
checked and bounded."""

from __future__ import annotations

import json

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api.fields import bounded
from behest.bounded_json import JsonRefused, parse
from behest.domain.waits import Answer, Decision, ElicitAction
from behest.errors import InvalidArgument

# Answers of one SubmitApprovals / SubmitToolResults, and their sizes.
MAX_ANSWERS = 256
MAX_CALL_ID_BYTES = 200
MAX_REASON_BYTES = 4 * 1024
MAX_RESULT_BYTES = 1024 * 1024


def approval_answers(request: pb.SubmitApprovalsRequest) -> list[Answer]:
    """Validate SubmitApprovals' decisions."""
    _answer_count(len(request.approvals), "approvals")
    answers = []
    for i, item in enumerate(request.approvals):
        where = f"approvals[{i}]"
        _call_id(item.call_id, where)
        bounded(item.reason, f"{where}.reason", MAX_REASON_BYTES)
        if item.decision not in (Decision.ALLOW, Decision.DENY, Decision.ALLOW_ALWAYS):
            raise InvalidArgument(
                f"{where}.decision must be APPROVAL_DECISION_ALLOW, _DENY or _ALLOW_ALWAYS"
            )
        answers.append(
            Answer(call_id=item.call_id, decision=Decision(item.decision), text=item.reason)
        )
    return answers


def tool_results(request: pb.SubmitToolResultsRequest) -> list[Answer]:
    """Validate SubmitToolResults' results."""
    _answer_count(len(request.results), "results")
    answers = []
    for i, item in enumerate(request.results):
        where = f"results[{i}]"
        _call_id(item.call_id, where)
        bounded(item.output, f"{where}.output", MAX_RESULT_BYTES)
        answers.append(Answer(call_id=item.call_id, text=item.output, is_error=item.is_error))
    return answers


def elicitation_answers(request: pb.SubmitElicitationAnswersRequest) -> list[Answer]:
    """Validate SubmitElicitationAnswers' answers (their content against the questions'
    schemas: runs/asking.py check_answers)."""
    _answer_count(len(request.answers), "answers")
    answers = []
    for i, item in enumerate(request.answers):
        where = f"answers[{i}]"
        if not item.elicitation_id:
            raise InvalidArgument(f"{where}.elicitation_id is required")
        bounded(item.elicitation_id, f"{where}.elicitation_id", MAX_CALL_ID_BYTES)
        bounded(item.content, f"{where}.content", MAX_RESULT_BYTES)
        if item.action not in (ElicitAction.ACCEPT, ElicitAction.DECLINE, ElicitAction.CANCEL):
            raise InvalidArgument(
                f"{where}.action must be ELICITATION_ACTION_ACCEPT, _DECLINE or _CANCEL"
            )
        action = ElicitAction(item.action)
        if action != ElicitAction.ACCEPT and item.content:
            raise InvalidArgument(f"{where}.content goes only with ELICITATION_ACTION_ACCEPT")
        content = _json_object(item.content, f"{where}.content") if item.content else ""
        answers.append(Answer(call_id=item.elicitation_id, text=content, action=action))
    return answers


def _json_object(text: str, where: str) -> str:
    """A JSON object from outside, bounded, in one canonical form (sorted keys, compact):
    the same answer sent again with its keys in another order is the same answer."""
    try:
        value = parse(text)
    except JsonRefused as exc:
        raise InvalidArgument(f"{where} is not JSON within the bounds: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where} must be a JSON object")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _answer_count(count: int, field: str) -> None:
    if not 1 <= count <= MAX_ANSWERS:
        raise InvalidArgument(f"{field} must hold 1 to {MAX_ANSWERS} answers, got {count}")


def _call_id(value: str, where: str) -> None:
    if not value:
        raise InvalidArgument(f"{where}.call_id is required")
    bounded(value, f"{where}.call_id", MAX_CALL_ID_BYTES)


def cancel_reason(request: pb.CancelRunRequest) -> str:
    bounded(request.reason, "reason", MAX_REASON_BYTES)
    return request.reason
