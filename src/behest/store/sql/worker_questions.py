"""The questions running tasks ask, in SQL (domain/workers.py TaskQuestion): stored against
the task by the replica its worker is connected to (fenced as a result is: the task leased to
that worker, its lease live), counted on the task (the run's replica, reading the task for
its result, sees the count grow), and answered once by the run's replica. On PostgreSQL each
is NOTIFYed at COMMIT: a question to the run's replica, an answer to the worker's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.waits import ElicitAction
from behest.domain.workers import (
    MAX_TASK_QUESTIONS,
    QuestionRefused,
    StoredQuestion,
    TaskAnswer,
    TaskQuestion,
    TaskState,
)
from behest.store.sql import channel_payloads as channel
from behest.store.sql import tool_tables as tt
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc
from behest.store.sql.workers import task_from_row

_k = tt.worker_tasks.c
_q = tt.worker_questions.c
_TASK = sa.select(tt.worker_tasks).where(_k.execution_id == sa.bindparam("b_id"))
_QUESTION = sa.select(tt.worker_questions).where(
    _q.execution_id == sa.bindparam("b_id"), _q.number == sa.bindparam("b_number")
)
_QUESTIONS = (
    sa.select(tt.worker_questions)
    .where(_q.execution_id == sa.bindparam("b_id"))
    .order_by(_q.number)
)


def question_from_row(row: Any) -> StoredQuestion:
    question = TaskQuestion(row.execution_id, row.number, row.message, row.requested_schema)
    answer = None
    if row.answered_at is not None:
        action = None if row.action is None else ElicitAction(row.action)
        answer = TaskAnswer(row.execution_id, row.number, action, row.content, row.error)
    return StoredQuestion(
        question=question, run_id=row.run_id, asked_at=utc(row.asked_at), answer=answer
    )


def store_question(
    conn: Connection, worker_id: str, question: TaskQuestion, *, now: datetime, node: str = ""
) -> StoredQuestion | QuestionRefused:
    """Store a task's question (or find it stored); nothing changes when it is refused."""
    query = _TASK.with_for_update() if conn.dialect.name == "postgresql" else _TASK
    row = conn.execute(query, {"b_id": question.execution_id}).first()
    if row is None:
        return QuestionRefused.UNKNOWN
    task = task_from_row(row)
    lapsed = task.lease_until is None or task.lease_until < now
    if task.state != TaskState.LEASED or task.worker_id != worker_id or lapsed:
        return QuestionRefused.NOT_YOURS
    params = {"b_id": question.execution_id, "b_number": question.number}
    found = conn.execute(_QUESTION, params).first()
    if found is not None:
        stored = question_from_row(found)
        return stored if stored.question == question else QuestionRefused.ANOTHER
    if task.questions >= MAX_TASK_QUESTIONS:
        return QuestionRefused.TOO_MANY
    stored = StoredQuestion(question=question, run_id=task.run_id, asked_at=now)
    conn.execute(
        sa.insert(tt.worker_questions),
        {
            "execution_id": question.execution_id,
            "number": question.number,
            "run_id": task.run_id,
            "message": question.message,
            "requested_schema": question.schema,
            "asked_at": now,
        },
    )
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.execution_id == question.execution_id)
        .values(questions=_k.questions + 1)
    )
    _signal(conn, node, channel.TASK_ASKED, question.execution_id)
    return stored


def store_answer(conn: Connection, answer: TaskAnswer, *, now: datetime, node: str = "") -> bool:
    """Store a question's answer, unless it has one."""
    done = conn.execute(
        sa.update(tt.worker_questions)
        .where(
            _q.execution_id == answer.execution_id,
            _q.number == answer.number,
            _q.answered_at.is_(None),
        )
        .values(
            action=None if answer.action is None else int(answer.action),
            content=answer.content,
            error=answer.error,
            answered_at=now,
        )
    )
    if not done.rowcount:
        return False
    _signal(conn, node, channel.TASK_ANSWERED, answer.execution_id)
    return True


def _signal(conn: Connection, node: str, kind: str, execution_id: str) -> None:
    if node and conn.dialect.name == "postgresql":
        channel.notify(conn, channel.SIGNALS, channel.signal_payload(node, kind, execution_id))


class WorkerQuestionsInSql:
    """The Store's methods for tasks' questions, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    @property
    def node(self) -> str:
        raise NotImplementedError

    async def ask_task_question(
        self, worker_id: str, question: TaskQuestion, *, now: datetime
    ) -> StoredQuestion | QuestionRefused:
        writer, node = self.engines.writer, self.node
        return await writer.write_small(store_question, worker_id, question, now=now, node=node)

    async def answer_task_question(self, answer: TaskAnswer, *, now: datetime) -> bool:
        writer, node = self.engines.writer, self.node
        return await writer.write_small(store_answer, answer, now=now, node=node)

    async def task_questions(self, execution_id: str) -> list[StoredQuestion]:
        async with self.engines.reader.connect() as conn:
            found = await conn.execute(_QUESTIONS, {"b_id": execution_id})
            return [question_from_row(row) for row in found]

    async def task_question(self, execution_id: str, number: int) -> StoredQuestion | None:
        params = {"b_id": execution_id, "b_number": number}
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(_QUESTION, params)).first()
            return None if row is None else question_from_row(row)
