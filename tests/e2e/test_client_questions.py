"""The Python client and the questions running tools ask (elicitation), against a real server
with the echo MCP server, whose `book` tool asks "How many nights in {city}?" (nights: an
integer from 1 to 30, required; breakfast: a boolean): answered by hand or by a handler while
the client follows the run, refused when the answer breaks the question's schema, never asked
twice on a replay. On SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from behest.client import (
    BehestClient,
    ElicitAction,
    ElicitationRequested,
    Event,
    InvalidArgument,
    PendingCallKind,
    Question,
    QuestionReply,
    Reply,
    RunOptions,
    RunStatus,
    TextDelta,
)
from tests.e2e.test_elicitation import BOOK, echo_servers
from tests.support import Server, fast_settings, start_server, stop_server

SCRIPT = RunOptions(model="script")


@pytest.fixture
async def asking(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with the echo MCP server (whose `book` tool asks), on both stores."""
    overrides: dict[str, object] = {"mcp": echo_servers()}
    if database_url:
        overrides["database_url"] = database_url
    running = await start_server(fast_settings(tmp_path, **overrides))
    try:
        yield running
    finally:
        await stop_server(running)


def said(events: list[Event]) -> str:
    """The text of the run's last model turn."""
    last = max(i for i, e in enumerate(events) if e.kind == "model_started")
    return "".join(e.data.delta for e in events[last:] if isinstance(e.data, TextDelta))


async def asked(client: BehestClient, run_id: str) -> ElicitationRequested:
    """Follow the run until its tool asks; the question."""
    async with contextlib.aclosing(client.watch(run_id)) as events:
        async for event in events:
            if isinstance(event.data, ElicitationRequested):
                return event.data
    raise AssertionError(f"run {run_id} ended without a question")


async def test_a_question_is_listed_refused_when_it_breaks_its_schema_and_answered(
    asking: Server,
) -> None:
    async with BehestClient(asking.address) as client:
        run_id = (await client.create_run(BOOK, SCRIPT)).run_id
        question = await asked(client, run_id)
        assert (question.tool_name, question.message) == (
            "echo__book",
            "How many nights in Lisbon?",
        )
        assert question.schema["required"] == ["nights"]
        assert question.schema["properties"]["nights"]["type"] == "integer"
        assert question.expires_at is not None
        assert (await client.get_run(run_id)).status == RunStatus.WAITING_FOR_INPUT

        [pending] = await client.pending_calls(run_id)
        assert pending.kind == PendingCallKind.ELICITATION
        assert pending.elicitation is not None
        assert pending.elicitation.elicitation_id == question.elicitation_id
        assert pending.elicitation.call_id == question.call_id
        assert pending.elicitation.message == "How many nights in Lisbon?"
        assert pending.elicitation.schema == question.schema

        for bad in ({"nights": "two"}, {"breakfast": True}, {"nights": 99}):
            with pytest.raises(InvalidArgument) as refused:
                await client.submit_elicitation_answers(run_id, {question.elicitation_id: bad})
            assert "does not match the question's schema" in refused.value.message
        assert [p.call.id for p in await client.pending_calls(run_id)] == [question.elicitation_id]

        waiting = await client.submit_elicitation_answers(
            run_id, {question.elicitation_id: {"nights": 2}}
        )
        assert waiting == []
        events = [e async for e in client.watch(run_id)]
    assert events[-1].kind == "run_completed"
    [answered] = [e.data for e in events if e.kind == "elicitation_answered"]
    assert (answered.action, answered.answered_by) == (ElicitAction.ACCEPT, "anonymous")
    assert not answered.timed_out and not answered.replayed
    assert said(events).startswith("echo__book: booked 2 night(s) in Lisbon (server pid")


class Handler:
    """A question handler that records what it was asked and gives `reply`."""

    def __init__(self, reply: QuestionReply) -> None:
        self.reply = reply
        self.questions: list[Question] = []

    def __call__(self, question: Question) -> QuestionReply:
        self.questions.append(question)
        return self.reply


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"nights": 3, "breakfast": True}, "booked 3 night(s) in Lisbon with breakfast"),
        (Reply(ElicitAction.ACCEPT, {"nights": 1}), "booked 1 night(s) in Lisbon (server pid"),
        (ElicitAction.DECLINE, "not booked: the user chose decline"),
        (Reply(ElicitAction.CANCEL), "not booked: the user chose cancel"),
    ],
)
async def test_stream_run_answers_a_question_with_the_handler(
    asking: Server, reply: QuestionReply, expected: str
) -> None:
    handler = Handler(reply)
    async with BehestClient(asking.address) as client:
        events = [e async for e in client.stream_run(BOOK, SCRIPT, answer_question=handler)]
    assert events[-1].kind == "run_completed"
    assert said(events).startswith(f"echo__book: {expected}")
    [question] = handler.questions
    assert (question.run_id, question.tool) == (events[0].run_id, "echo__book")
    assert question.message == "How many nights in Lisbon?"
    assert question.schema["properties"]["nights"]["maximum"] == 30
    [requested] = [e.data for e in events if isinstance(e.data, ElicitationRequested)]
    assert (question.elicitation_id, question.call_id) == (
        requested.elicitation_id,
        requested.call_id,
    )


async def test_watching_a_run_again_does_not_ask_an_answered_question_again(
    asking: Server,
) -> None:
    first = Handler({"nights": 2})
    async with BehestClient(asking.address) as client:
        events = [e async for e in client.stream_run(BOOK, SCRIPT, answer_question=first)]
        assert len(first.questions) == 1
        again = Handler({"nights": 5})
        replayed = [e async for e in client.watch(events[0].run_id, answer_question=again)]
    assert replayed == events
    assert again.questions == []
    assert said(events).startswith("echo__book: booked 2 night(s)")


async def test_a_handlers_reply_that_breaks_the_schema_ends_the_stream_and_the_run_waits(
    asking: Server,
) -> None:
    async def wrong(question: Question) -> dict[str, Any]:
        return {"nights": "many"}

    async with BehestClient(asking.address) as client:
        stream = client.stream_run(BOOK, SCRIPT, answer_question=wrong)
        seen: list[Event] = []
        with pytest.raises(InvalidArgument):
            async for event in stream:
                seen.append(event)
        run_id = seen[0].run_id
        [pending] = await client.pending_calls(run_id)
        assert pending.kind == PendingCallKind.ELICITATION
        assert (
            await client.submit_elicitation_answers(run_id, {pending.call.id: {"nights": 4}}) == []
        )
        events = [e async for e in client.watch(run_id)]
    assert said(events).startswith("echo__book: booked 4 night(s) in Lisbon")
