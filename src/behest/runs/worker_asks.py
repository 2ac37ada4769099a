"""The questions of workers' tasks in this process, and their answers: both sides' way to the
store, and their wake-ups.

The worker's side (a worker connected here, runs/worker_session.py): a question is checked
(what behest asks: runs/asking.py), stored against its task (fenced as a result is: the task
leased to this worker), then its answer waited for, which the session sends the worker. Asked
again (after a reconnect, on any replica) it is the question stored: answered at once if it
has its answer, never put to the user twice.

The run's side (runs/worker_questions.py) reads a task's questions and stores their answers.
A question stored here wakes the run here that waits for the task (`asked`); an answer stored
here wakes the worker's side here at once. Other replicas see them at once on PostgreSQL,
where both are NOTIFYed (store/sql/worker_questions.py) and signalled here, else at their next
look (every `poll_s`).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from behest.bounded_json import JsonRefused, parse
from behest.domain.waits import Question
from behest.domain.workers import (
    QuestionRefused,
    StoredQuestion,
    TaskAnswer,
    TaskQuestion,
    TaskState,
    WorkerRecord,
)
from behest.runs.asking import MAX_SCHEMA_BYTES, checked_digest
from behest.runs.task_outcomes import DEADLINE_GRACE_S
from behest.store.base import Store

# The kind of the replicas' signal that a task's question has its answer.
TASK_ANSWERED = "answered"
_GRACE = timedelta(seconds=DEADLINE_GRACE_S)


class WorkerAsks:
    """Tasks' questions: stored, answered, and their answers waited for."""

    def __init__(self, *, store: Store, poll_s: float, asked: Callable[[str], None]) -> None:
        """`asked(execution_id)`: a question of the task was stored here."""
        self._store = store
        self._poll_s = poll_s
        self._asked = asked
        # The worker's side: what waits here for the answers of a task's questions.
        self._waiting: dict[str, set[asyncio.Event]] = collections.defaultdict(set)

    # --- the worker's side ----------------------------------------------------------------

    async def ask(self, worker: WorkerRecord, question: TaskQuestion) -> TaskAnswer:
        """The answer to send `worker` for its task's question, once there is one; or at
        once an error: a question behest does not ask, a task the worker does not hold."""
        problem = _problem(question)
        if problem:
            return _refused(question, problem)
        stored = await self._store.ask_task_question(worker.id, question, now=_now())
        if isinstance(stored, QuestionRefused):
            return _refused(question, stored.value)
        if stored.answer is not None:
            return stored.answer
        self._asked(question.execution_id)
        return await self._answer(worker, question)

    async def _answer(self, worker: WorkerRecord, question: TaskQuestion) -> TaskAnswer:
        """The question's answer once stored, or an error once its task is no longer the
        worker's (it ended, or its lease was lost): nothing will answer it then."""
        key = question.execution_id
        event = asyncio.Event()
        self._waiting[key].add(event)
        try:
            while True:
                stored = await self._store.task_question(key, question.number)
                if stored is not None and stored.answer is not None:
                    return stored.answer
                if stored is None or not await self._held(worker, key):
                    why = "the task ended (or its time was up) before the question was answered"
                    return _refused(question, why)
                try:
                    await asyncio.wait_for(event.wait(), self._poll_s)
                except TimeoutError:
                    pass
                event.clear()
        finally:
            waiting = self._waiting[key]
            waiting.discard(event)
            if not waiting:
                del self._waiting[key]

    async def _held(self, worker: WorkerRecord, execution_id: str) -> bool:
        """Whether the worker still holds the task, within its time (after it nothing waits
        for the task: a run that stopped waiting gives it up no more)."""
        task = await self._store.worker_task(execution_id)
        if task is None or task.state != TaskState.LEASED or task.worker_id != worker.id:
            return False
        return task.deadline is None or _now() <= task.deadline + _GRACE

    def answered(self, execution_id: str) -> None:
        """A question of the task has its answer (stored here, or signalled): its waiters
        here look now."""
        for event in self._waiting.get(execution_id, ()):
            event.set()

    # --- the run's side -------------------------------------------------------------------

    async def questions(self, execution_id: str) -> list[StoredQuestion]:
        """The questions the task asked, by number."""
        return await self._store.task_questions(execution_id)

    async def answer(self, answer: TaskAnswer) -> None:
        """Store the answer to a task's question (once), for the worker's side to send."""
        await self._store.answer_task_question(answer, now=_now())
        self.answered(answer.execution_id)


def _problem(question: TaskQuestion) -> str:
    """Why behest does not ask this question ("" when it does): its schema must be a valid
    JSON Schema of an object, and both bounded (runs/asking.py)."""
    if "\x00" in question.message or "\x00" in question.schema:
        return "the question contains a NUL character (\\u0000)"
    try:
        schema = parse(question.schema, max_bytes=MAX_SCHEMA_BYTES)
    except JsonRefused as exc:  # "is not valid JSON (…)", "is N bytes; the limit is …"
        return f"the question's schema {exc}"
    if not isinstance(schema, dict):
        return "the question's schema must be a JSON Schema of an object"
    try:
        checked_digest(Question(call_id="", message=question.message, schema=schema))
    except ValueError as exc:
        return str(exc)
    return ""


def _refused(question: TaskQuestion, why: str) -> TaskAnswer:
    return TaskAnswer(question.execution_id, question.number, error=f"not asked: {why}")


def _now() -> datetime:
    return datetime.now(UTC)
