"""The run's side of the questions a worker's task asks: while the run waits for the task's
outcome (runs/worker_hub.py reads the task at each wake-up and look), a task whose count of
questions grew has its questions read, and each one not answered yet is put to the run's user
(runs/asking.py: a pending call of kind ELICITATION, the run WAITING_FOR_INPUT meanwhile,
answered by SubmitElicitationAnswers); its answer is stored against the question, for the
worker's replica to send (runs/worker_asks.py).

Only the run's owner writes its events: the worker's replica only stores the question. A run
taken up again (another node, after a crash) asks the task's unanswered questions again, and
Asking replays those the user answered meanwhile. A question's name in the run is its call,
its text and schema and how often the task asked them up to its number, so the same task
asking again gets the same answers.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

from behest.domain.executions import ToolExecution
from behest.domain.runs import Run
from behest.domain.workers import StoredQuestion, Task, TaskAnswer
from behest.runs.asking import Asking
from behest.runs.worker_asks import WorkerAsks
from behest.tools.context import ToolContext


class TaskQuestions:
    """The questions of one execution's task, put to the user as they come."""

    def __init__(
        self, *, run: Run, execution: ToolExecution, asking: Asking, asks: WorkerAsks
    ) -> None:
        self._run = run
        self._execution = execution
        self._asking = asking
        self._asks = asks
        self._counted = 0  # the task's count of questions, as last seen
        self._deadline: datetime | None = None  # the task's, as last seen
        self._grew = asyncio.Event()
        self._asked: dict[int, asyncio.Task[None]] = {}  # by number: put to the user here
        # Set with the exception that stopped a question (a step not stored, a lost claim).
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read())

    def seen(self, task: Task) -> None:
        """The task as just read: new questions are read now."""
        self._deadline = task.deadline
        if task.questions > self._counted:
            self._counted = task.questions
            self._grew.set()

    async def close(self) -> None:
        """Stop asking (the task has its outcome): unanswered questions stay stored, and
        expire as asked (at the task's deadline at the latest)."""
        jobs = [self._reader, *self._asked.values()]
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        if not self.failed.done():
            self.failed.cancel()
        elif not self.failed.cancelled():
            self.failed.exception()  # seen: the outcome came first, or it was raised

    async def _read(self) -> None:
        try:
            while True:
                await self._grew.wait()
                self._grew.clear()
                stored = await self._asks.questions(self._execution.id)
                asks = [_what(found) for found in stored]
                for i, found in enumerate(stored):
                    number = found.question.number
                    if found.answer is None and number not in self._asked:
                        times = asks[: i + 1].count(asks[i])  # asked that often up to now
                        job = asyncio.create_task(self._put(found, times))
                        job.add_done_callback(self._done)
                        self._asked[number] = job
        except Exception as exc:
            self._fail(exc)

    async def _put(self, stored: StoredQuestion, times: int) -> None:
        """Put the question to the user; store the answer (an error: one behest does not
        ask, which the worker's replica checked already)."""
        question = stored.question
        try:
            schema = json.loads(question.schema)
            if not isinstance(schema, dict):
                raise ValueError("the question's schema must be a JSON Schema of an object")
            reply = await self._asking.ask(self._context(), question.message, schema, times=times)
        except ValueError as exc:
            answer = TaskAnswer(question.execution_id, question.number, error=f"not asked: {exc}")
        else:
            content = "" if reply.content is None else json.dumps(reply.content)
            answer = TaskAnswer(question.execution_id, question.number, reply.action, content)
        await self._asks.answer(answer)

    def _done(self, job: asyncio.Task[None]) -> None:
        if not job.cancelled() and (exc := job.exception()) is not None:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if not self.failed.done():
            self.failed.set_exception(exc)

    def _context(self) -> ToolContext:
        """The task's execution, as a question of its call is asked (it waits within the
        task's deadline)."""
        execution, run = self._execution, self._run
        return ToolContext(
            execution_id=execution.id,
            attempt=execution.attempt,
            idempotency_key=execution.idempotency_key,
            run_id=run.id,
            session_id=run.session_id,
            tenant=run.tenant,
            principal="",
            call_id=execution.call_id,
            tool_name=execution.tool_name,
            deadline=self._deadline,
        )


def _what(stored: StoredQuestion) -> tuple[str, str]:
    """What a question asks: its text and schema (as Asking tells questions apart)."""
    question = stored.question
    try:
        schema = json.dumps(json.loads(question.schema), sort_keys=True, separators=(",", ":"))
    except ValueError:
        schema = question.schema
    return question.message, schema
