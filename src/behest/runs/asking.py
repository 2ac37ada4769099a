"""Questions running tools ask the user (elicitation): a durable pause inside a tool call.

A tool asks through its context (`await context.ask(message, schema)`, tools/context.py); an
MCP server's elicitation request comes the same way (tools/mcp_elicit.py). The question is
stored as a pending call of kind ELICITATION, with an ElicitationRequested event, in one step;
while any question waits the run shows WAITING_FOR_INPUT (runs/progress.py `asking`) and the
call waits for its answer: SubmitElicitationAnswers on this node wakes it at once, one on
another replica is seen within ANSWER_POLL_S. A question unanswered at its expiry (the earlier
of the run's elicitation timeout and the tool's own deadline: a tool waits within its timeout)
gets CANCEL, timed out. The answer goes to the tool with an ElicitationAnswered event; its
content was checked against the question's schema when it was submitted (`check_answers`).

The question survives a crash: the run is taken up once it is answered (or expired), its tool
call runs again (at once if idempotent, else after a reconciliation), asks again and gets the
stored answer at once (ElicitationAnswered, `replayed`). A question is named by its call, the
text and schema asked and how often this execution asked them before
("<call_id>~<n>-<digest>"), so a tool that asks the same things in the same order gets the
same answers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from behest.bounded_json import JsonRefused, parse
from behest.domain import events as ev
from behest.domain.runs import Run, RunStatus
from behest.domain.waits import Answer, ElicitAction, PendingCall, Question, Reply, WaitKind
from behest.errors import FailedPrecondition, InvalidArgument
from behest.events.notify import Notifier, answers_key
from behest.events.run_log import RunLog
from behest.runs.progress import RunProgress
from behest.store.base import Store
from behest.store.writes import ExpireCalls, RequestInput
from behest.tools.context import ToolContext
from behest.tools.registry import ToolRegistry

# How often a waiting call looks for an answer stored through another replica.
ANSWER_POLL_S = 0.5
# Bounds of a question from a tool (an MCP server is outside behest).
MAX_MESSAGE_BYTES = 16 * 1024
MAX_SCHEMA_BYTES = 64 * 1024
_ID_CALL_CHARS = 160  # an id stays within the 200 characters of a pending call's id


@dataclass(frozen=True, slots=True)
class AskPolicy:
    """How long a question waits for its answer at most (settings: elicitation_timeout_s)."""

    timeout_s: float = 3600.0


class Asking:
    """One run's questions: storing them, waiting for their answers, replaying stored ones."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        store: Store,
        progress: RunProgress,
        notifier: Notifier,
        policy: AskPolicy,
    ) -> None:
        self._run = run
        self._log = log
        self._store = store
        self._progress = progress
        self._notifier = notifier
        self._policy = policy
        self._asked: dict[tuple[str, str], int] = {}  # (execution, digest) → times asked

    async def ask(
        self,
        context: ToolContext,
        message: str,
        schema: dict[str, Any],
        *,
        times: int | None = None,
    ) -> Reply:
        """The user's answer to the question of the call of `context` (ValueError: a question
        behest does not ask, saying why). `times`: how often the execution asked it, this
        time included, when the caller counts (a worker's task: runs/worker_questions.py);
        else this Asking counts."""
        question = Question(call_id=context.call_id, message=message, schema=schema)
        digest = checked_digest(question)
        key = (context.execution_id, digest)
        asked = times if times is not None else self._asked.get(key, 0) + 1
        self._asked[key] = asked
        elicitation_id = f"{context.call_id[:_ID_CALL_CHARS]}~{asked}-{digest}"
        stored = await self._stored(elicitation_id)
        if stored is not None and (stored.answer is not None or stored.expired(_now())):
            return await self._told(stored, replayed=True)  # asked before behest stopped
        self._progress.asking += 1  # the run shows WAITING_FOR_INPUT from the request on
        try:
            if stored is None:
                stored = await self._request(elicitation_id, question, context)
            answered = await self._answer(elicitation_id, stored.expires_at)
        finally:
            self._progress.asking -= 1
        return await self._told(answered, replayed=False)

    async def _request(
        self, elicitation_id: str, question: Question, context: ToolContext
    ) -> PendingCall:
        """Store the question, and say so, in one durable step."""
        now = _now()
        expires = now + timedelta(seconds=self._policy.timeout_s)
        if context.deadline is not None:
            expires = min(expires, context.deadline)
        pending = PendingCall(
            run_id=self._run.id,
            call_id=elicitation_id,
            session_id=self._run.session_id,
            tenant=self._run.tenant,
            kind=WaitKind.ELICITATION,
            tool_name=context.tool_name,
            arguments="",
            ordinal=0,
            requested_at=now,
            expires_at=expires,
            question=question,
        )
        requested = ev.ElicitationRequested(
            elicitation_id,
            question.call_id,
            context.tool_name,
            question.message,
            json.dumps(question.schema, separators=(",", ":")),
            expires,
        )
        state = [RequestInput((pending,)), *self._progress.state(RunStatus.WAITING_FOR_TOOLS)]
        await (await self._log.emit(requested, state=state))
        return pending

    async def _answer(self, elicitation_id: str, expires_at: datetime) -> PendingCall:
        """The question once answered or expired, as stored."""
        while True:
            ticket = self._notifier.ticket(answers_key(self._run.id))
            stored = await self._stored(elicitation_id)
            if stored is None:
                raise FailedPrecondition(f"question {elicitation_id} is no longer stored")
            now = _now()
            if stored.answer is not None or stored.expired(now):
                return stored
            left = (min(expires_at, stored.expires_at) - now).total_seconds()
            await Notifier.wait(ticket, max(0.0, min(ANSWER_POLL_S, left)))

    async def _told(self, stored: PendingCall, *, replayed: bool) -> Reply:
        """Say how the question was answered (one durable step) and hand the answer over."""
        answer = stored.answer
        timed_out = answer is None
        action = ElicitAction.CANCEL if answer is None or answer.action is None else answer.action
        assert stored.question is not None
        told = ev.ElicitationAnswered(
            stored.call_id,
            stored.question.call_id,
            stored.tool_name,
            action,
            stored.answered_by,
            timed_out=timed_out,
            replayed=replayed,
        )
        state = [*self._progress.state(RunStatus.WAITING_FOR_TOOLS)]
        if timed_out and not stored.timed_out:
            state.insert(0, ExpireCalls(run_id=self._run.id, call_ids=(stored.call_id,)))
        await (await self._log.emit(told, state=state))
        if answer is None or action != ElicitAction.ACCEPT:
            return Reply(action)
        return Reply(action, json.loads(answer.text))

    async def _stored(self, elicitation_id: str) -> PendingCall | None:
        calls = await self._store.pending_calls(self._run.id)
        return next((c for c in calls if c.call_id == elicitation_id), None)


def check_answers(pending: Sequence[PendingCall], answers: Sequence[Answer]) -> None:
    """Answers to a run's questions, checked against what was asked (InvalidArgument: an
    accepted answer whose content does not fit the question's schema)."""
    questions = {p.call_id: p.question for p in pending if p.kind == WaitKind.ELICITATION}
    for i, answer in enumerate(answers):
        question = questions.get(answer.call_id)
        if question is None or answer.action != ElicitAction.ACCEPT:
            continue  # an unknown one is NOT_FOUND when the answers are stored
        try:
            content = parse(answer.text or "null")
        except (JsonRefused, ValueError) as exc:
            raise InvalidArgument(f"answers[{i}].content is not JSON: {exc}") from None
        if not isinstance(content, dict):
            raise InvalidArgument(f"answers[{i}].content must be a JSON object")
        what, against = f"answers[{i}].content", "the question's schema"
        problem = ToolRegistry.check_value(what, content, question.schema, against)
        if problem:
            raise InvalidArgument(problem)


def checked_digest(question: Question) -> str:
    """The question's digest, once it is one behest asks (ValueError, saying why, if not):
    bounded, its schema a valid JSON Schema of an object (MCP's requestedSchema)."""
    if not question.message.strip():
        raise ValueError("a question needs a message to show the user")
    if len(question.message.encode()) > MAX_MESSAGE_BYTES:
        raise ValueError(f"the question's message is over {MAX_MESSAGE_BYTES} bytes")
    text = json.dumps(question.schema, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise ValueError(f"the question's schema is over {MAX_SCHEMA_BYTES} bytes")
    if question.schema.get("type") != "object":
        raise ValueError('the question\'s schema must be of "type": "object"')
    try:
        Draft202012Validator.check_schema(question.schema)
    except SchemaError as exc:
        raise ValueError(
            f"the question's schema is not a valid JSON Schema: {exc.message}"
        ) from None
    return hashlib.sha256(f"{question.message}\n{text}".encode()).hexdigest()[:12]


def _now() -> datetime:
    return datetime.now(UTC)
