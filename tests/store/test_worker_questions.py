"""The questions of workers' tasks in the store (store/sql/worker_questions.py), on both
backends: stored only for the worker that holds the task's live lease and counted on the
task, the same question again is the one stored (with its answer once it has one), another
under its number or past the most a task asks is refused, and an answer is stored once."""

from __future__ import annotations

from dataclasses import replace

from behest.domain.waits import ElicitAction
from behest.domain.workers import (
    MAX_TASK_QUESTIONS,
    QuestionRefused,
    StoredQuestion,
    TaskAnswer,
    TaskQuestion,
    TaskState,
)
from behest.store.sql.store import SqlStore
from behest.store.writes import EnqueueTask
from tests.store.helpers import at, create
from tests.store.test_erasure import task

SCHEMA = '{"type": "object"}'


async def leased_task(store: SqlStore, worker_id: str = "w-1", lease_s: float = 60) -> str:
    run = await create(store)
    leased = replace(
        task(run), state=TaskState.LEASED, worker_id=worker_id, lease_until=at(lease_s)
    )
    await store.apply([EnqueueTask(leased)])
    return leased.execution_id


async def test_a_question_is_stored_for_the_tasks_worker_and_counted(store: SqlStore) -> None:
    execution_id = await leased_task(store)
    question = TaskQuestion(execution_id, 1, "How many?", SCHEMA)

    stored = await store.ask_task_question("w-1", question, now=at())
    again = await store.ask_task_question("w-1", question, now=at())
    other = await store.ask_task_question("w-1", replace(question, message="Who?"), now=at())
    stranger = await store.ask_task_question("w-2", replace(question, number=2), now=at())
    unknown = await store.ask_task_question("w-1", replace(question, execution_id="x"), now=at())

    assert isinstance(stored, StoredQuestion) and stored.answer is None
    assert again == stored
    assert other == QuestionRefused.ANOTHER
    assert stranger == QuestionRefused.NOT_YOURS
    assert unknown == QuestionRefused.UNKNOWN
    task_now = await store.worker_task(execution_id)
    assert task_now is not None and task_now.questions == 1
    assert [s.question for s in await store.task_questions(execution_id)] == [question]


async def test_a_lapsed_lease_or_an_ended_task_asks_nothing(store: SqlStore) -> None:
    lapsed = await leased_task(store, lease_s=-1)
    refused = await store.ask_task_question(
        "w-1", TaskQuestion(lapsed, 1, "How many?", SCHEMA), now=at()
    )
    ended = await leased_task(store)
    assert await store.give_up_task(ended, TaskState.LEASED, "too late")
    after = await store.ask_task_question(
        "w-1", TaskQuestion(ended, 1, "How many?", SCHEMA), now=at()
    )
    assert refused == after == QuestionRefused.NOT_YOURS
    assert await store.task_questions(lapsed) == await store.task_questions(ended) == []


async def test_a_task_asks_at_most_so_many_questions(store: SqlStore) -> None:
    execution_id = await leased_task(store)
    for number in range(1, MAX_TASK_QUESTIONS + 1):
        question = TaskQuestion(execution_id, number, f"Question {number}?", SCHEMA)
        assert isinstance(await store.ask_task_question("w-1", question, now=at()), StoredQuestion)
    one_more = TaskQuestion(execution_id, MAX_TASK_QUESTIONS + 1, "And?", SCHEMA)
    assert await store.ask_task_question("w-1", one_more, now=at()) == QuestionRefused.TOO_MANY


async def test_an_answer_is_stored_once_and_comes_with_the_question(store: SqlStore) -> None:
    execution_id = await leased_task(store)
    question = TaskQuestion(execution_id, 1, "How many?", SCHEMA)
    await store.ask_task_question("w-1", question, now=at())
    answer = TaskAnswer(execution_id, 1, ElicitAction.ACCEPT, '{"n": 2}')

    assert await store.answer_task_question(answer, now=at())
    assert not await store.answer_task_question(
        replace(answer, action=ElicitAction.DECLINE, content=""), now=at()
    )
    assert not await store.answer_task_question(replace(answer, number=2), now=at())
    stored = await store.task_question(execution_id, 1)
    asked_again = await store.ask_task_question("w-1", question, now=at())
    assert stored is not None and stored.answer == answer
    assert isinstance(asked_again, StoredQuestion) and asked_again.answer == answer
    refused = TaskAnswer(execution_id, 2, error="not asked: why")
    await store.ask_task_question("w-1", TaskQuestion(execution_id, 2, "Who?", SCHEMA), now=at())
    assert await store.answer_task_question(refused, now=at())
    again = await store.task_question(execution_id, 2)
    assert again is not None and again.answer == refused
