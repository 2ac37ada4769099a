"""A worker tool asks the run's user (`TaskContext.ask`) against the fake WorkerService: the
question goes out as a WorkerAsk numbered within its task, the answer comes back as the Reply
(accepted with its content, declined), a question still open is sent again on the next stream
under the same number, the server's refusal is a ValueError, a sync tool asks from its thread,
and a check's context cannot ask."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import pytest

from behest.worker import ElicitAction, Reply, TaskContext, Verified
from tests.fakes.worker_service import FakeWorkerService
from tests.unit.test_worker_sdk import fast_worker, serving

GUESTS = {"type": "object", "properties": {"guests": {"type": "integer"}}}


@pytest.fixture
async def fake() -> AsyncIterator[FakeWorkerService]:
    async with FakeWorkerService() as service:
        yield service


async def test_questions_are_numbered_and_their_answers_are_the_replies(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)

    @worker.tool
    async def book(city: str, context: TaskContext) -> str:
        first = await context.ask(f"How many guests in {city}?", GUESTS)
        second = await context.ask("Breakfast?", {"type": "object"})
        return json.dumps([first, second])

    async with serving(worker):
        stream = await fake.stream()
        sent = stream.task("book", {"city": "Lisbon"})
        asked = await stream.ask()
        stream.answer(asked, "accept", {"guests": 3})
        again = await stream.ask()
        stream.answer(again, "decline")
        result = await stream.result()
    assert (asked.execution_id, asked.number, asked.message) == (
        sent.execution_id,
        1,
        "How many guests in Lisbon?",
    )
    assert json.loads(asked.requested_schema) == GUESTS
    assert (again.number, again.message) == (2, "Breakfast?")
    assert json.loads(result.output) == [["accept", {"guests": 3}], ["decline", None]]
    assert not result.is_error


async def test_an_open_question_is_asked_again_on_the_next_stream(
    fake: FakeWorkerService,
) -> None:
    worker = fast_worker(fake.address)
    replies: list[Reply] = []

    @worker.tool
    async def book(context: TaskContext) -> str:
        replies.append(await context.ask("How many guests?", GUESTS))
        return "booked"

    async with serving(worker):
        first = await fake.stream()
        first.task("book")
        asked = await first.ask()
        first.end(grpc.StatusCode.UNAVAILABLE, "server stopping")
        second = await fake.stream()
        again = await second.ask()
        second.answer(again, "accept", {"guests": 5})
        result = await second.result()
    assert (again.execution_id, again.number, again.message) == (
        asked.execution_id,
        asked.number,
        asked.message,
    )
    assert replies == [Reply(ElicitAction.ACCEPT, {"guests": 5})]
    assert result.output == "booked"
    assert second.asks.empty()


async def test_a_refused_question_is_a_value_error_in_the_tool(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)

    @worker.tool
    async def book(context: TaskContext) -> str:
        try:
            await context.ask("How many?", {"type": "array"})
        except ValueError as exc:
            return f"not asked: {exc}"
        return "asked"

    async with serving(worker):
        stream = await fake.stream()
        stream.task("book")
        stream.answer(await stream.ask(), error="the schema must be an object's")
        result = await stream.result()
    assert result.output == "not asked: the schema must be an object's"


async def test_a_sync_tool_asks_from_its_thread(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)

    @worker.tool
    def book(context: TaskContext) -> str:
        action, content = asyncio.run(context.ask("How many guests?", GUESTS))
        return f"{action}: {content}"

    async with serving(worker):
        stream = await fake.stream()
        stream.task("book")
        stream.answer(await stream.ask(), "accept", {"guests": 1})
        result = await stream.result()
    assert result.output == "accept: {'guests': 1}"


async def test_a_checks_context_cannot_ask(fake: FakeWorkerService) -> None:
    worker = fast_worker(fake.address)
    said: list[str] = []

    async def check(context: TaskContext) -> Verified | None:
        try:
            await context.ask("Did it run?", {"type": "object"})
        except RuntimeError as exc:
            said.append(str(exc))
        return None

    @worker.tool(verify=check)
    async def charge(context: TaskContext) -> str:
        return "charged"

    async with serving(worker):
        stream = await fake.stream()
        stream.verify("charge")
        verdict = await stream.verdict()
    assert not verdict.known
    assert said == ["charge: only a task running here asks the user"]
    assert stream.asks.empty()
